// graph_bindings.cpp — see graph_bindings.h.
#include "python/graph_bindings.h"

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <utility>

#include "base/stream_capture.h"
#include "integration/graph.h"

namespace py = pybind11;

namespace torch_openreg {
namespace {

using PoolTuple = std::pair<c10::CaptureId_t, c10::CaptureId_t>;

at::GraphCaptureMode captureModeNamed(const std::string& name) {
  if (name == "default") return at::GraphCaptureMode::Default;
  if (name == "global") return at::GraphCaptureMode::Global;
  if (name == "thread_local") return at::GraphCaptureMode::ThreadLocal;
  if (name == "relaxed") return at::GraphCaptureMode::Relaxed;
  TORCH_CHECK_VALUE(false, "capture_error_mode must be 'global', 'thread_local' or 'relaxed' ",
                    "('default' is 'global'), got '", name, "'");
}

// {"nodes": [...], "edges": [...]} of a kept graph (torch.cuda's
// get_graph_data, with what an openreg node has).
py::dict graphData(const CapturedGraph& graph) {
  std::vector<py::list> dependents(graph.nodes.size());
  py::list edges;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (uint32_t dependency : graph.nodes[i].dependencies) {
      dependents[dependency].append(i);
      py::dict edge;
      edge["from"] = dependency;
      edge["to"] = i;
      edges.append(edge);
    }
  }
  py::list nodes;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const CapturedNode& node = graph.nodes[i];
    const c10::Stream& stream = graph.streams[node.stream];
    py::dict entry;
    entry["index"] = i;
    entry["node_type"] = node.kind;
    entry["name"] = node.name;
    entry["stream_id"] = stream.id();
    entry["dependencies"] = py::list(py::cast(node.dependencies));
    entry["dependents"] = dependents[i];
    nodes.append(entry);
  }
  py::dict data;
  data["device"] = static_cast<int>(graph.device);
  data["nodes"] = nodes;
  data["edges"] = edges;
  return data;
}

}  // namespace

void bindGraphs(py::module& m) {
  py::class_<GraphImpl>(m, "_OpenRegGraph", "An openreg graph: capture, instantiate, replay.")
      .def(py::init([](bool keepGraph) {
             at::GraphImplArgs args;
             args.keep_graph = keepGraph;
             return std::make_unique<GraphImpl>(args);
           }),
           py::arg("keep_graph") = false)
      .def(
          "capture_begin",
          [](GraphImpl& graph, std::optional<PoolTuple> pool, const std::string& mode) {
            graph.capture_begin(pool.value_or(PoolTuple{0, 0}), captureModeNamed(mode));
          },
          py::arg("pool") = std::nullopt, py::arg("capture_error_mode") = "global",
          "Begin capturing the current stream's work (not the default stream).")
      // Wrapped where the call may warn, so that the warning reaches Python.
      .def("capture_end",
           torch::wrap_pybind_function([](GraphImpl& graph) { graph.capture_end(); }),
           "End the capture begun on the current stream.")
      .def("instantiate", &GraphImpl::instantiate, "Make the captured graph replayable.")
      .def("replay", &GraphImpl::replay, "Enqueue the captured work on the current stream.")
      .def("reset", &GraphImpl::reset, "Forget the graph and release its memory pool.")
      .def(
          "pool", [](const GraphImpl& graph) { return graph.pool(); },
          "The id of the graph's memory pool, (n, 0) or a MemPool's (0, n).")
      .def("enable_debug_mode", &GraphImpl::enable_debug_mode,
           "Keep the captured graph after instantiation, for debug_dump.")
      .def("debug_dump", torch::wrap_pybind_function([](GraphImpl& graph, const std::string& path) {
             graph.debug_dump(path);
           }),
           py::arg("debug_path"), "Write the kept graph to a file in Graphviz DOT.")
      .def_property_readonly("_has_graph_exec", &GraphImpl::hasGraphExec,
                             "Whether replay() can run without instantiating first.")
      .def(
          "_graph_data",
          [](const GraphImpl& graph) -> py::object {
            const auto kept = graph.keptGraph();
            if (kept == nullptr) return py::none();
            return graphData(*kept);
          },
          "The captured graph's nodes and edges (None before capture_end).")
      .def(
          "_dot",
          [](const GraphImpl& graph) -> py::object {
            const auto kept = graph.keptGraph();
            if (kept == nullptr) return py::none();
            return py::str(graphDot(*kept));
          },
          "The captured graph in Graphviz DOT (None before capture_end).");
  m.def(
      "_graph_pool_handle",
      [] {
        const c10::MempoolId_t id = graphPoolHandle();
        return py::make_tuple(id.first, id.second);
      },
      "A new graph memory pool id (torch.openreg.graph_pool_handle).");
  m.def("_is_current_stream_capturing", &currentStreamCapturing,
        "Whether the current stream of the current openreg device is capturing a graph.");
  m.def(
      "_abandon_graph_captures",
      [] {
        py::list origins;
        for (const c10::Stream& stream : abandonStreamCaptures()) {
          origins.append(py::make_tuple(stream.device_index(), stream.id()));
        }
        return origins;
      },
      "At exit: end the graph captures still underway, discarding them; the (device, stream "
      "id) each began on.");
  m.def("_register_graph_impl", &registerGraphImplementation,
        "Register openreg's graphs for torch.accelerator.Graph (after the backend rename).");
}

}  // namespace torch_openreg
