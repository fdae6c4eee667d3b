#!/usr/bin/env python3
"""Fails when docs/config.md, the table in common/env.cc and the XTIMER_* names used anywhere
in the sources disagree: every variable is documented once, with the default the code uses."""
import pathlib
import re
import subprocess
import sys

dump, root = sys.argv[1], pathlib.Path(sys.argv[2])
table = dict(
    line.split("\t", 1)
    for line in subprocess.run([dump], check=True, capture_output=True, text=True).stdout.splitlines()
)

doc_rows = {}
for line in (root / "docs/config.md").read_text().splitlines():
    m = re.match(r"\|\s*`(XTIMER_[A-Z0-9_]+)`\s*\|\s*`?([^|`]*)`?\s*\|", line)
    if m:
        if m.group(1) in doc_rows:
            sys.exit(f"docs/config.md documents {m.group(1)} twice")
        doc_rows[m.group(1)] = m.group(2).strip()

errors = []
for name, default in table.items():
    if name not in doc_rows:
        errors.append(f"{name} is in common/env.cc but not in docs/config.md")
    elif doc_rows[name] != (default or "(unset)"):
        errors.append(f"{name}: docs/config.md says default '{doc_rows[name]}', code says '{default or '(unset)'}'")
for name in doc_rows:
    if name not in table:
        errors.append(f"{name} is in docs/config.md but not in common/env.cc")

# Environment variables as code uses them: a quoted name ("XTIMER_X" in getenv, env::Int,
# os.environ[...]), an assignment (XTIMER_X=... in shell, Python keyword arguments, CMake test
# ENVIRONMENT) or a shell expansion ($XTIMER_X). Macros and CMake options do not match.
# Only the product's code is scanned (tests may have harness variables of their own); CMake files
# are not, their ${XTIMER_...} are CMake variables.
patterns = [
    r"[\"']((?:XTIMER)_[A-Z][A-Z0-9_]*[A-Z0-9])[\"']",
    r"(?<![\w-])((?:XTIMER)_[A-Z][A-Z0-9_]*[A-Z0-9])=",
    r"\$\{?((?:XTIMER)_[A-Z][A-Z0-9_]*[A-Z0-9])",
]
product = ["common", "preload", "launcher", "collector", "viewer", "slowdown", "netprobe", "ckpt", "scripts"]
used = set()
for folder in product:
    for path in (root / folder).rglob("*"):
        if path.suffix in {".cc", ".h", ".py", ".sh", ".cpp"} and path.is_file():
            text = path.read_text(errors="replace")
            for pat in patterns:
                used |= set(re.findall(pat, text))
for name in sorted(used - set(table)):
    errors.append(f"{name} is used in the sources but is not in the table in common/env.cc")

if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"{len(table)} XTIMER_* variables: code, docs and sources agree")
