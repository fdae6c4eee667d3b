// xtimer._ckpt: the Python binding of the checkpoint core. xtimer/ckpt/*.py builds on it;
// user code imports xtimer.ckpt, not this module. Copies run with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/copier.h"
#include "ckpt/cuda_copy.h"
#include "ckpt/persist.h"
#include "ckpt/segment.h"
#include "common/env.h"

namespace py = pybind11;
using namespace xtimer::ckpt;

namespace {

PyObject* g_error = nullptr;

[[noreturn]] void Raise(const Status& st) {
  PyErr_SetString(g_error, st.message().c_str());
  throw py::error_already_set();
}

void Check(const Status& st) {
  if (!st.ok()) Raise(st);
}

// (name, dtype, device, shape, ptr, nbytes, elem_size, strides, cuda_device)
using EntryTuple = std::tuple<std::string, std::string, std::string, std::vector<int64_t>, uintptr_t, uint64_t, int,
                              std::vector<int64_t>, int>;

class PyCheckpointer {
 public:
  PyCheckpointer(const std::string& ckpt_dir, int rank, const std::string& shm_dir, int keep, int persist_on_failure,
                 const std::string& saver_binary, double saver_idle_exit, int threads) {
    CheckpointerOptions o;
    o.ckpt_dir = ckpt_dir;
    o.rank = rank;
    o.shm_dir = shm_dir;
    o.keep = keep;
    o.persist_on_failure = persist_on_failure;
    o.saver_binary = saver_binary;
    o.saver_idle_exit_s = saver_idle_exit;
    o.threads = threads;
    Check(RankCheckpointer::Create(o, &c_));
  }

  py::tuple Save(int64_t step, int world_size, const std::string& tree_json, const std::vector<EntryTuple>& entries,
                 bool disk) {
    SaveArgs args;
    args.step = step;
    args.world_size = world_size;
    args.tree_json = tree_json;
    args.disk = disk;
    args.entries.reserve(entries.size());
    for (const auto& t : entries) {
      SaveEntry e;
      e.name = std::get<0>(t);
      e.dtype = std::get<1>(t);
      e.device = std::get<2>(t);
      e.shape = std::get<3>(t);
      e.src.ptr = reinterpret_cast<const void*>(std::get<4>(t));
      e.src.nbytes = std::get<5>(t);
      e.src.elem_size = std::get<6>(t);
      e.src.shape = e.shape;
      e.src.strides = std::get<7>(t);
      e.src.cuda_device = std::get<8>(t);
      if (DtypeSize(e.dtype) != e.src.elem_size)
        Raise(Status::Error("entry " + e.name + ": dtype " + e.dtype + " does not have " +
                            std::to_string(e.src.elem_size) + "-byte elements"));
      args.entries.push_back(std::move(e));
    }
    bool saved = false;
    std::string why;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = c_->Save(std::move(args), &saved, &why);
    }
    Check(st);
    return py::make_tuple(saved, why);
  }

  // The newest snapshot in memory: (step, world_size, index_json), or None. Keeps it pinned
  // until copy_memory_into() or release_memory().
  py::object MemoryIndex() {
    lease_.Release();
    Status st = c_->LeaseMemory(&lease_);
    if (st.code() == Status::Code::kNotFound) return py::none();
    Check(st);
    const Index& idx = lease_.index();
    return py::make_tuple(idx.info.step, idx.info.world_size, py::bytes(idx.index_json));
  }

  void CopyMemoryInto(const std::vector<uintptr_t>& dst, int threads) {
    if (!lease_.held()) Raise(Status::Error("internal: no memory snapshot pinned"));
    const Index& idx = lease_.index();
    if (dst.size() != idx.entries.size()) Raise(Status::Error("internal: wrong number of destinations"));
    std::vector<const void*> src;
    std::vector<void*> d;
    std::vector<uint64_t> len;
    std::vector<Checksum> sums;
    for (size_t i = 0; i < dst.size(); ++i) {
      src.push_back(lease_.image() + idx.entries[i].offset);
      d.push_back(reinterpret_cast<void*>(dst[i]));
      len.push_back(idx.entries[i].nbytes);
      sums.push_back(idx.entries[i].sum);
    }
    int64_t bad;
    {
      py::gil_scoped_release nogil;
      bad = CopyOutVerified(src, d, len, sums, threads);
    }
    std::string what = lease_.what();
    lease_.Release();
    if (bad >= 0)
      Raise(Status::Corrupt(what + ": checksum mismatch in entry " + idx.entries[static_cast<size_t>(bad)].name));
  }

  void ReleaseMemory() { lease_.Release(); }

  // True when every disk save asked for is durable; False on timeout; raises on a failure.
  bool Wait(double timeout) {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = c_->Wait(timeout, nullptr);
    }
    if (st.code() == Status::Code::kBusy) return false;
    Check(st);
    return true;
  }

  py::tuple Progress() {
    Segment* seg = c_->segment();
    if (seg == nullptr) return py::make_tuple(int64_t{-1}, uint64_t{0}, uint64_t{0});
    Control* c = seg->ctl();
    return py::make_tuple(A(c->progress_step).load(), A(c->progress_done).load(), A(c->progress_total).load());
  }

  bool Pending() { return c_->DiskPending(); }

  int64_t PersistedStep() { return c_->PersistedStep(); }
  void Close() {
    lease_.Release();
    c_->Close();
  }
  std::string CtlPath() { return c_->ctl_path(); }
  bool InlinePersist() { return c_->inline_persist(); }

 private:
  std::unique_ptr<RankCheckpointer> c_;
  ReadLease lease_;
};

class PyXtcFile {
 public:
  explicit PyXtcFile(const std::string& path) { Check(XtcFile::Open(path, &f_)); }
  int64_t step() const { return f_.index().info.step; }
  int world_size() const { return f_.index().info.world_size; }
  int rank() const { return f_.index().info.rank; }
  py::bytes index_json() const { return py::bytes(f_.index().index_json); }
  void ReadInto(const std::vector<uintptr_t>& dst) {
    std::vector<void*> d;
    for (uintptr_t p : dst) d.push_back(reinterpret_cast<void*>(p));
    Status st;
    {
      py::gil_scoped_release nogil;
      st = f_.ReadInto(d);
    }
    Check(st);
  }
  void Verify() {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = f_.Verify();
    }
    Check(st);
  }
  // The file mapped (copy on write) and verified: a buffer the entries can be viewed in.
  std::shared_ptr<XtcMapping> MapVerified() {
    std::unique_ptr<XtcMapping> m;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = f_.MapVerified(&m);
    }
    Check(st);
    return std::shared_ptr<XtcMapping>(std::move(m));
  }

 private:
  XtcFile f_;
};

}  // namespace

PYBIND11_MODULE(_ckpt, m) {
  m.doc() = "xtimer flash checkpoint core (use xtimer.ckpt)";
  g_error = PyErr_NewExceptionWithDoc("xtimer._ckpt.CheckpointError",
                                      "A checkpoint could not be saved or loaded; the message says why and what to do.",
                                      PyExc_RuntimeError, nullptr);
  m.attr("CheckpointError") = py::handle(g_error);

  m.def("env_string", [](const std::string& n) { return xtimer::env::String(n.c_str()); });
  m.def("env_int", [](const std::string& n) { return xtimer::env::Int(n.c_str()); });
  m.def("env_bool", [](const std::string& n) { return xtimer::env::Bool(n.c_str()); });

  py::class_<PyCheckpointer>(m, "RankCheckpointer")
      .def(py::init<const std::string&, int, const std::string&, int, int, const std::string&, double, int>(),
           py::arg("ckpt_dir"), py::arg("rank"), py::arg("shm_dir") = "", py::arg("keep") = -1,
           py::arg("persist_on_failure") = -1, py::arg("saver_binary") = "", py::arg("saver_idle_exit") = 300.0,
           py::arg("threads") = 0)
      .def("save", &PyCheckpointer::Save)
      .def("memory_index", &PyCheckpointer::MemoryIndex)
      .def("copy_memory_into", &PyCheckpointer::CopyMemoryInto, py::arg("dst"), py::arg("threads") = 0)
      .def("release_memory", &PyCheckpointer::ReleaseMemory)
      .def("wait", &PyCheckpointer::Wait, py::arg("timeout") = -1.0)
      .def("progress", &PyCheckpointer::Progress)
      .def("pending", &PyCheckpointer::Pending)
      .def("persisted_step", &PyCheckpointer::PersistedStep)
      .def("close", &PyCheckpointer::Close)
      .def_property_readonly("ctl_path", &PyCheckpointer::CtlPath)
      .def_property_readonly("inline_persist", &PyCheckpointer::InlinePersist);

  py::class_<PyXtcFile>(m, "XtcFile")
      .def(py::init<const std::string&>())
      .def_property_readonly("step", &PyXtcFile::step)
      .def_property_readonly("rank", &PyXtcFile::rank)
      .def_property_readonly("world_size", &PyXtcFile::world_size)
      .def_property_readonly("index_json", &PyXtcFile::index_json)
      .def("read_into", &PyXtcFile::ReadInto)
      .def("verify", &PyXtcFile::Verify)
      .def("map_verified", &PyXtcFile::MapVerified);

  // A mapped rank file: a writable buffer (writes stay private); views of it keep it mapped.
  py::class_<XtcMapping, std::shared_ptr<XtcMapping>>(m, "XtcMapping", py::buffer_protocol())
      .def_buffer([](XtcMapping& mp) {
        return py::buffer_info(mp.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(mp.size())}, {static_cast<py::ssize_t>(1)}, false);
      })
      .def_property_readonly("size", &XtcMapping::size);

  m.def("scan_disk", [](const std::string& dir) {
    std::vector<DiskStep> steps;
    Check(ScanDisk(dir, &steps));
    py::list out;
    for (const DiskStep& s : steps) out.append(py::make_tuple(s.step, s.world_size, s.complete, s.ranks, s.problem));
    return out;
  });
  m.def("rank_file", &RankFile);
  m.def("read_latest", [](const std::string& dir) { return ReadLatest(dir, nullptr); });
  m.def("checksum", [](py::buffer b) {
    py::buffer_info info = b.request();
    Checksum c = ChecksumOf(info.ptr, static_cast<size_t>(info.size * info.itemsize));
    return py::make_tuple(c.a, c.b);
  });
  m.def("cuda_runtime", []() {
    std::string detail;
    bool ok = CudaRuntimeAvailable(&detail);
    return py::make_tuple(ok, detail);
  });
}
