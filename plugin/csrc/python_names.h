// How Python names torch's types: "torch.float32", "torch.sparse_coo", "torch.channels_last".
// One place for every room: the messages of errors that reach Python users (value -> name), and
// the remote modules' program decoder (nn/program_decoder.cpp), which reads the names Python's
// lowering writes (name -> value). Each table drives both directions; the dtypes' is torch's own
// (c10::getDtypeNames). The op _nn_program_tables gives them to Python (plugin/nn/_lower.py).
#pragma once

#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gilfree_rpc {

// A dtype as Python prints it: "torch.float32", "torch.int64".
inline std::string dtypeName(at::ScalarType dtype) {
  return "torch." + std::string(c10::getDtypeNames(dtype).first);
}

// Every dtype Python has a name for, by each of its names as Python prints them: its name
// ("torch.float32") and, where it has one, its legacy name ("torch.float").
inline std::vector<std::pair<std::string, at::ScalarType>> dtypeNames() {
  std::vector<std::pair<std::string, at::ScalarType>> names;
  for (int i = 0; i < static_cast<int>(at::ScalarType::NumOptions); ++i) {
    const auto dtype = static_cast<at::ScalarType>(i);
    std::pair<std::string_view, std::string_view> both;
    try {
      both = c10::getDtypeNames(dtype);
    } catch (const c10::Error&) {
      continue;  // a dtype Python has no name for
    }
    names.emplace_back("torch." + std::string(both.first), dtype);
    if (!both.second.empty()) {
      names.emplace_back("torch." + std::string(both.second), dtype);
    }
  }
  return names;
}

// The dtype of one of those names, with or without "torch."; nullopt when none.
inline std::optional<at::ScalarType> dtypeFromName(std::string_view name) {
  const std::string_view bare = name.substr(0, 6) == "torch." ? name.substr(6) : name;
  for (const auto& [each, dtype] : dtypeNames()) {
    if (std::string_view(each).substr(6) == bare) {
      return dtype;
    }
  }
  return std::nullopt;
}

// Every layout by the name Python prints.
inline constexpr std::array<std::pair<at::Layout, const char*>, 8> kLayoutNames{{
    {at::kStrided, "torch.strided"},
    {at::kSparse, "torch.sparse_coo"},
    {at::kSparseCsr, "torch.sparse_csr"},
    {at::kSparseCsc, "torch.sparse_csc"},
    {at::kSparseBsr, "torch.sparse_bsr"},
    {at::kSparseBsc, "torch.sparse_bsc"},
    {at::kMkldnn, "torch._mkldnn"},
    {at::kJagged, "torch.jagged"},
}};

// A layout as Python prints it: "torch.strided", "torch.sparse_coo".
inline std::string layoutName(at::Layout layout) {
  for (const auto& [each, name] : kLayoutNames) {
    if (each == layout) {
      return name;
    }
  }
  return "layout " + std::to_string(static_cast<int>(layout));
}

// The layout of a name as Python prints it ("torch.strided", the prefix included); nullopt when none.
inline std::optional<at::Layout> layoutFromName(std::string_view name) {
  for (const auto& [layout, each] : kLayoutNames) {
    if (name == each) {
      return layout;
    }
  }
  return std::nullopt;
}

// Every memory format by the name Python prints.
inline constexpr std::array<std::pair<at::MemoryFormat, const char*>, 4> kMemoryFormatNames{{
    {at::MemoryFormat::Contiguous, "torch.contiguous_format"},
    {at::MemoryFormat::Preserve, "torch.preserve_format"},
    {at::MemoryFormat::ChannelsLast, "torch.channels_last"},
    {at::MemoryFormat::ChannelsLast3d, "torch.channels_last_3d"},
}};

// The memory format of one of those names, with or without "torch."; nullopt when none.
inline std::optional<at::MemoryFormat> memoryFormatFromName(std::string_view name) {
  const std::string_view bare = name.substr(0, 6) == "torch." ? name.substr(6) : name;
  for (const auto& [format, each] : kMemoryFormatNames) {
    if (std::string_view(each).substr(6) == bare) {
      return format;
    }
  }
  return std::nullopt;
}

}  // namespace gilfree_rpc
