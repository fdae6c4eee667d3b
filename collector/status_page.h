// The collector's page (status_page.cc): one self-contained HTML document (inline style, no
// script, nothing fetched from elsewhere) rendered from the status object (core_status.h). Every
// string from agents is HTML-escaped; links point only at files the collector wrote, under
// `link_prefix` ("<prefix><round>/<file>"). No state; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace xtimer::collector {

std::string RenderStatusPage(const nlohmann::json& status, std::string_view link_prefix);

}  // namespace xtimer::collector
