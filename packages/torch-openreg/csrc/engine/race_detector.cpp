// race_detector.cpp — vector clocks per stream, access histories per
// allocation, and the reports (see race_detector.h for the model).
//
// One mutex guards all state: the detector runs only in debug mode, where
// clarity beats throughput. Python stacks are captured before the mutex is
// taken and formatted after it is released, because both need the GIL, and
// a thread holding the GIL may be waiting for the mutex.
#include "engine/race_detector.h"

#include <Python.h>
#include <c10/util/Exception.h>

#include <frameobject.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "base/debug_modes.h"
#include "base/kernel_thread.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

// ---- Python stacks -------------------------------------------------------------

struct Frame {
  PyCodeObject* code;  // owned reference
  int line;
};

// Code objects to release once the GIL is held again (a stack may be
// destroyed on any thread, under the detector's mutex).
std::mutex releasableMutex;
std::vector<PyCodeObject*> releasable;

struct PythonStack {
  std::vector<Frame> frames;  // innermost first
  PythonStack() = default;
  PythonStack(const PythonStack&) = delete;
  PythonStack& operator=(const PythonStack&) = delete;
  ~PythonStack() {
    if (frames.empty()) return;
    std::lock_guard<std::mutex> lock(releasableMutex);
    for (const Frame& frame : frames) releasable.push_back(frame.code);
  }
};

void releaseCodeObjectsWithGil() {
  std::vector<PyCodeObject*> codes;
  {
    std::lock_guard<std::mutex> lock(releasableMutex);
    codes.swap(releasable);
  }
  for (PyCodeObject* code : codes) Py_DECREF(code);
}

// The calling thread's Python stack, if it runs Python code (autograd's
// backward threads and other C++ threads have none).
std::shared_ptr<const PythonStack> captureStack() {
  auto stack = std::make_shared<PythonStack>();
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return stack;
  const PyGILState_STATE gil = PyGILState_Ensure();
  releaseCodeObjectsWithGil();
  constexpr size_t kMaxFrames = 32;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr && stack->frames.size() < kMaxFrames) {
    stack->frames.push_back(Frame{PyFrame_GetCode(frame), PyFrame_GetLineNumber(frame)});
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyGILState_Release(gil);
  return stack;
}

// Frames of torch, torch_openreg and the test runner say nothing about the
// user's bug.
bool isLibraryFile(const std::string& file) {
  for (const char* library : {"/torch/", "/torch_openreg/", "/_pytest/", "/pluggy/"}) {
    if (file.find(library) != std::string::npos) return true;
  }
  return false;
}

// The innermost frames outside torch and torch_openreg, outermost first, as
// a traceback prints them.
std::string formatStack(const PythonStack& stack, const char* indent) {
  if (stack.frames.empty())
    return std::string(indent) + "(launched outside Python code, e.g. by autograd's backward)\n";
  struct Line {
    std::string file, function;
    int line;
  };
  std::vector<Line> lines;
  const PyGILState_STATE gil = PyGILState_Ensure();
  for (const Frame& frame : stack.frames) {
    const char* file = PyUnicode_AsUTF8(frame.code->co_filename);
    const char* function = PyUnicode_AsUTF8(frame.code->co_name);
    lines.push_back(Line{file ? file : "?", function ? function : "?", frame.line});
  }
  PyErr_Clear();
  PyGILState_Release(gil);
  constexpr size_t kShown = 4;
  std::vector<const Line*> shown;
  for (const Line& line : lines) {
    if (!isLibraryFile(line.file) && shown.size() < kShown) shown.push_back(&line);
  }
  if (shown.empty()) shown.push_back(&lines.front());
  std::ostringstream text;
  for (auto it = shown.rbegin(); it != shown.rend(); ++it) {
    text << indent << "File \"" << (*it)->file << "\", line " << (*it)->line << ", in "
         << (*it)->function << "\n";
  }
  return text.str();
}

// ---- Clocks --------------------------------------------------------------------

using Clock = std::vector<uint64_t>;  // indexed by stream number

uint64_t at(const Clock& clock, size_t stream) { return stream < clock.size() ? clock[stream] : 0; }

void merge(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

// ---- Accesses ------------------------------------------------------------------

// One launch, shared by the accesses it made. `completion` is set by the
// launch path when the work has run.
struct LaunchRecord {
  std::string operation;
  c10::Stream stream;
  std::shared_ptr<const PythonStack> stack;
  std::shared_ptr<LaunchCompletion> completion;
};

bool finished(const LaunchRecord& launch) {
  return launch.completion->finished.load(std::memory_order_acquire);
}

struct Access {
  uint32_t stream;
  uint64_t step;
  uintptr_t begin, end;  // device addresses
  bool write;
  bool ofFreedTensor = false;  // made on memory since freed and handed out again
  std::shared_ptr<const LaunchRecord> launch;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
};

struct Allocation {
  uintptr_t begin, end;
  std::vector<Access> history;
  std::vector<c10::Stream> recordedStreams;  // Tensor.record_stream
};

bool overlaps(uintptr_t aBegin, uintptr_t aEnd, uintptr_t bBegin, uintptr_t bEnd) {
  return aBegin < bEnd && bBegin < aEnd;
}

std::string describeStream(const c10::Stream& stream) {
  std::ostringstream text;
  text << (stream.id() == 0 ? "the default stream" : "stream " + std::to_string(stream.id()))
       << " of openreg:" << static_cast<int>(stream.device_index());
  return text.str();
}

// How the user's code can name a stream: the default stream by its
// accessor, others by the role they play in the fix.
std::string pythonName(const c10::Stream& stream, const char* role) {
  if (stream.id() == 0)
    return "torch.openreg.default_stream(" + std::to_string(stream.device_index()) + ")";
  return std::string(role);
}

std::string describeTensor(const std::vector<int64_t>& sizes, c10::ScalarType dtype) {
  std::ostringstream text;
  text << "shape [";
  for (size_t i = 0; i < sizes.size(); ++i) text << (i ? ", " : "") << sizes[i];
  text << "], dtype " << c10::toString(dtype);
  return text.str();
}

// What a report needs, gathered under the mutex and formatted after it: a
// race between two accesses, or memory handed out again while an earlier
// access to it was still queued (`current` unused; `handout` says where).
struct PendingReport {
  enum class Kind : uint8_t { Race, ReusedWhileQueued };
  enum class Handout : uint8_t { Host, Kernel };
  Access current;
  Access previous;
  uintptr_t allocationBegin, allocationEnd;
  Kind kind = Kind::Race;
  Handout handout = Handout::Host;
  bool recorded = false;  // the earlier access's stream was declared with record_stream
  bool allocatorFault = false;  // the allocator should have waited (not the user's bug)
  std::shared_ptr<const PythonStack> handoutStack;
};

constexpr size_t kKeptReports = 100;
constexpr size_t kHistoryLimit = 64;      // accesses kept per allocation
constexpr size_t kFreedLimit = 4096;      // freed allocations remembered

class RaceDetector final : public StreamOrderObserver {
 public:
  std::shared_ptr<LaunchCompletion> check(const std::string& operation, const c10::Stream& stream,
                                          c10::ArrayRef<at::Tensor> reads,
                                          c10::ArrayRef<at::Tensor> writes);
  void recordResults(const std::string& operation, const c10::Stream& stream,
                     c10::ArrayRef<at::Tensor> writes);
  void streamWaited(const c10::Stream& waiter, const c10::Stream& producer);

  void eventRecorded(const void* event, const c10::Stream& stream) override;
  void streamWaitedForEvent(const c10::Stream& stream, const void* event) override;
  void eventSynchronized(const void* event) override;
  void streamSynchronized(const c10::Stream& stream) override;
  void deviceSynchronized(c10::DeviceIndex device) override;
  void memoryAllocated(const void* pointer, size_t bytes, orStream_t stream) override;
  void memoryFreed(const void* pointer) override;
  void streamRecorded(const void* pointer, const c10::Stream& stream) override;
  void eventDestroyed(const void* event) override;

  RaceStatistics statistics();
  std::vector<std::string> reports();
  void clearReports();
  void reset();

 private:
  uint32_t indexOf(const c10::Stream& stream);
  Allocation& allocationOf(const at::Tensor& tensor, std::vector<PendingReport>& found);
  Allocation& adopt(uintptr_t begin, uintptr_t end, PendingReport::Handout handout,
                    orStream_t owner, std::vector<PendingReport>& found);
  bool inherit(const Allocation& old, const Access& access, PendingReport::Handout handout,
               orStream_t owner, std::vector<PendingReport>& found);
  bool orderedBefore(const Access& earlier, uint32_t stream) const;
  bool recordedOn(const Allocation& allocation, uint32_t stream);
  uint32_t recordLaunch(const std::shared_ptr<const LaunchRecord>& launch,
                        c10::ArrayRef<at::Tensor> reads, c10::ArrayRef<at::Tensor> writes,
                        std::vector<PendingReport>& found);
  void access(Allocation& allocation, Access access, std::vector<PendingReport>& found);
  void forget(std::vector<Access>& history);
  void publish(std::vector<PendingReport>& found);
  std::string format(const PendingReport& report);
  std::string formatReuse(const PendingReport& report);

  std::mutex mutex_;
  std::unordered_map<c10::Stream, uint32_t> streamIndex_;
  std::vector<c10::Stream> streams_;
  std::vector<Clock> clocks_;
  Clock host_;
  std::unordered_map<const void*, Clock> events_;
  std::map<uintptr_t, Allocation> live_;   // by first address
  std::map<uintptr_t, Allocation> freed_;  // by first address
  std::deque<uintptr_t> freedOrder_;
  std::deque<std::string> reports_;
  RaceStatistics statistics_;
};

uint32_t RaceDetector::indexOf(const c10::Stream& stream) {
  auto [found, inserted] = streamIndex_.emplace(stream, static_cast<uint32_t>(streams_.size()));
  if (inserted) {
    streams_.push_back(stream);
    clocks_.emplace_back();
  }
  return found->second;
}

bool RaceDetector::orderedBefore(const Access& earlier, uint32_t stream) const {
  return earlier.stream == stream || at(clocks_[stream], earlier.stream) >= earlier.step;
}

// Accesses every future launch is ordered after (the host has waited for
// them) can never race again.
void RaceDetector::forget(std::vector<Access>& history) {
  history.erase(std::remove_if(history.begin(), history.end(),
                               [&](const Access& a) { return at(host_, a.stream) >= a.step; }),
                history.end());
}

bool RaceDetector::recordedOn(const Allocation& allocation, uint32_t stream) {
  for (const c10::Stream& recorded : allocation.recordedStreams) {
    if (indexOf(recorded) == stream) return true;
  }
  return false;
}

// Whether the new owner of memory inherits `access` of its freed owner, to be
// checked against its own first access. What the detector has seen decides,
// not what the allocator believed: an access whose work has run is harmless
// once its stream was declared with record_stream (the allocator had to wait
// for it); one still queued on the stream the host hands the memory out for
// is ordered before the new owner's work by that stream; any other still
// queued is reported now if nothing can order it before the new owner's work
// — its stream was declared (the allocator should have waited), or the memory
// goes to a kernel (queued work runs behind it).
bool RaceDetector::inherit(const Allocation& old, const Access& access,
                           PendingReport::Handout handout, orStream_t owner,
                           std::vector<PendingReport>& found) {
  const bool recorded = recordedOn(old, access.stream);
  if (finished(*access.launch)) return !recorded;
  const bool ownersStream = owner != nullptr && nativeHandle(streams_[access.stream]) == owner;
  if (handout == PendingReport::Handout::Host && ownersStream) return true;
  if (recorded || handout == PendingReport::Handout::Kernel) {
    PendingReport report{access, access, old.begin, old.end};
    report.kind = PendingReport::Kind::ReusedWhileQueued;
    report.handout = handout;
    report.recorded = recorded;
    // A kernel on the access's own stream runs before that queued access only
    // if the host freed the memory after queueing it: the allocator's to honour.
    report.allocatorFault =
        recorded || nativeHandle(streams_[access.stream]) == runningKernelStream();
    found.push_back(std::move(report));
    return false;
  }
  return true;
}

// A live allocation for [begin, end): new memory inherits the accesses of
// freed memory it overlaps, so that they are checked against its own.
Allocation& RaceDetector::adopt(uintptr_t begin, uintptr_t end, PendingReport::Handout handout,
                                orStream_t owner, std::vector<PendingReport>& found) {
  Allocation allocation{begin, end, {}, {}};
  for (auto it = freed_.begin(); it != freed_.end();) {
    Allocation& old = it->second;
    if (!overlaps(old.begin, old.end, begin, end)) {
      ++it;
      continue;
    }
    forget(old.history);
    for (auto a = old.history.begin(); a != old.history.end();) {
      if (!overlaps(a->begin, a->end, begin, end)) {
        ++a;
        continue;
      }
      const bool kept = inherit(old, *a, handout, owner, found);
      if (kept) {
        // Only the bytes the new owner can reach: its first access covering
        // them then settles the inherited access (see access()).
        Access inherited = *a;
        inherited.begin = std::max(a->begin, begin);
        inherited.end = std::min(a->end, end);
        inherited.ofFreedTensor = true;
        allocation.history.push_back(std::move(inherited));
      }
      // Settled here (reported, or harmless) for every later owner too.
      a = kept ? std::next(a) : old.history.erase(a);
    }
    const bool covered = old.begin >= begin && old.end <= end;
    it = covered || old.history.empty() ? freed_.erase(it) : std::next(it);
  }
  live_.erase(begin);
  return live_.emplace(begin, std::move(allocation)).first->second;
}

// Memory first seen at an access was allocated while the detector did not
// watch: as if the host had just handed it out.
Allocation& RaceDetector::allocationOf(const at::Tensor& tensor,
                                       std::vector<PendingReport>& found) {
  const auto begin = reinterpret_cast<uintptr_t>(tensor.storage().data());
  auto live = live_.find(begin);
  if (live != live_.end()) return live->second;
  return adopt(begin, begin + tensor.storage().nbytes(), PendingReport::Handout::Host, nullptr,
               found);
}

void RaceDetector::access(Allocation& allocation, Access current,
                          std::vector<PendingReport>& found) {
  forget(allocation.history);
  for (const Access& previous : allocation.history) {
    if (!(previous.write || current.write)) continue;
    if (!overlaps(previous.begin, previous.end, current.begin, current.end)) continue;
    if (orderedBefore(previous, current.stream)) continue;
    found.push_back(PendingReport{current, previous, allocation.begin, allocation.end});
  }
  // What the new access makes redundant: its own stream's earlier accesses to
  // the same bytes, and (for a write) anything ordered before it that it covers.
  // An access of the freed tensor serves only to check the new owner's first
  // access to its bytes: once that was checked against it (one of the two
  // writes, or the new access is ordered after it), it was reported or found
  // ordered, and later work on this memory is checked against the new
  // owner's own accesses instead — never again against the freed tensor.
  auto subsumed = [&](const Access& a) {
    const bool covered = a.begin >= current.begin && a.end <= current.end;
    if (!covered) return false;
    if (a.ofFreedTensor) return a.write || current.write || orderedBefore(a, current.stream);
    if (a.stream == current.stream) return current.write || !a.write;
    return current.write && orderedBefore(a, current.stream);
  };
  auto& history = allocation.history;
  history.erase(std::remove_if(history.begin(), history.end(), subsumed), history.end());
  if (history.size() >= kHistoryLimit) history.erase(history.begin());
  history.push_back(std::move(current));
}

std::vector<int64_t> sizesOf(const at::Tensor& tensor) {
  return std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end());
}

// The bytes a tensor can reach: from its first element to its last.
std::pair<uintptr_t, uintptr_t> byteRange(const at::Tensor& tensor) {
  const auto base = reinterpret_cast<uintptr_t>(tensor.storage().data());
  const auto itemSize = static_cast<uintptr_t>(tensor.element_size());
  uintptr_t extent = 1;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    extent += static_cast<uintptr_t>(tensor.size(d) - 1) *
              static_cast<uintptr_t>(std::abs(tensor.stride(d)));
  }
  const uintptr_t begin = base + static_cast<uintptr_t>(tensor.storage_offset()) * itemSize;
  return {begin, begin + extent * itemSize};
}

bool tracked(const at::Tensor& tensor) {
  // Nested and sparse tensors have no strides to bound their bytes with: not checked.
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1 &&
         tensor.layout() == c10::kStrided && !tensor.is_nested() && tensor.has_storage() &&
         tensor.storage().data() != nullptr && tensor.numel() > 0;
}

std::shared_ptr<LaunchCompletion> RaceDetector::check(const std::string& operation,
                                                      const c10::Stream& stream,
                                                      c10::ArrayRef<at::Tensor> reads,
                                                      c10::ArrayRef<at::Tensor> writes) {
  auto completion = std::make_shared<LaunchCompletion>();
  auto launch =
      std::make_shared<LaunchRecord>(LaunchRecord{operation, stream, captureStack(), completion});
  std::vector<PendingReport> found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recordLaunch(launch, reads, writes, found);
  }
  publish(found);
  return completion;
}

// One step of the launch's stream, its accesses checked and recorded; the
// stream's index. The caller holds the mutex.
uint32_t RaceDetector::recordLaunch(const std::shared_ptr<const LaunchRecord>& launch,
                                    c10::ArrayRef<at::Tensor> reads,
                                    c10::ArrayRef<at::Tensor> writes,
                                    std::vector<PendingReport>& found) {
  const uint32_t index = indexOf(launch->stream);
  Clock& clock = clocks_[index];
  merge(clock, host_);
  if (clock.size() <= index) clock.resize(index + 1, 0);
  const uint64_t step = ++clock[index];
  ++statistics_.checkedLaunches;
  auto visit = [&](const at::Tensor& tensor, bool write) {
    if (!tracked(tensor)) return;
    const auto [begin, end] = byteRange(tensor);
    access(allocationOf(tensor, found),
           Access{index, step, begin, end, write, false, launch, sizesOf(tensor),
                  tensor.scalar_type()},
           found);
  };
  for (const at::Tensor& tensor : writes) visit(tensor, true);
  for (const at::Tensor& tensor : reads) visit(tensor, false);
  return index;
}

void RaceDetector::eventDestroyed(const void* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.erase(event);
}

void RaceDetector::recordResults(const std::string& operation, const c10::Stream& stream,
                                 c10::ArrayRef<at::Tensor> writes) {
  auto completion = std::make_shared<LaunchCompletion>();
  completion->markFinished();  // the synchronous kernel has run
  auto launch =
      std::make_shared<LaunchRecord>(LaunchRecord{operation, stream, captureStack(), completion});
  std::vector<PendingReport> found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint32_t index = indexOf(stream);
    const uint64_t step = at(clocks_[index], index);
    for (const at::Tensor& tensor : writes) {
      if (!tracked(tensor)) continue;
      const auto [begin, end] = byteRange(tensor);
      access(allocationOf(tensor, found),
             Access{index, step, begin, end, true, false, launch, sizesOf(tensor),
                    tensor.scalar_type()},
             found);
    }
  }
  publish(found);
}

std::string RaceDetector::formatReuse(const PendingReport& report) {
  const Access& before = report.previous;
  const std::string beforeStream = describeStream(before.launch->stream);
  const bool byKernel = report.handout == PendingReport::Handout::Kernel;
  std::ostringstream text;
  text << "openreg stream race (memory reused while in use): memory that " << beforeStream
       << " still had to " << (before.write ? "write" : "read") << " was handed out again "
       << (byKernel ? "to a kernel allocating while it runs" : "to a new tensor") << ".\n";
  text << "  memory: allocation 0x" << std::hex << report.allocationBegin << std::dec << " ("
       << (report.allocationEnd - report.allocationBegin)
       << " bytes), device openreg:" << static_cast<int>(before.launch->stream.device_index())
       << "\n";
  text << "  queued access: " << before.launch->operation << (before.write ? " writes " : " reads ")
       << "the freed tensor (" << describeTensor(before.sizes, before.dtype) << ") on "
       << beforeStream << ", launched at\n"
       << formatStack(*before.launch->stack, "    ");
  if (!byKernel && report.handoutStack != nullptr) {
    text << "  handed out at\n" << formatStack(*report.handoutStack, "    ");
  }
  if (report.allocatorFault) {
    text << "  cause: "
         << (report.recorded ? "the tensor was recorded on that stream with record_stream, "
                               "so its memory had to wait for that work"
                             : "memory freed while work queued behind the allocating kernel "
                               "still uses it must wait for that work")
         << "; the caching allocator did not wait. This is a bug in openreg, not in your code: "
            "please report it with this message.";
  } else {
    text << "  fix: call tensor.record_stream(s) on the freed tensor for the stream s it was used "
            "on ("
         << beforeStream << ") before it is freed, so its memory is reused only after that work.";
  }
  return text.str();
}

std::string RaceDetector::format(const PendingReport& report) {
  if (report.kind == PendingReport::Kind::ReusedWhileQueued) return formatReuse(report);
  const Access& now = report.current;
  const Access& before = report.previous;
  const char* kind =
      now.write ? (before.write ? "write-after-write" : "write-after-read") : "read-after-write";
  const std::string nowStream = describeStream(now.launch->stream);
  const std::string beforeStream = describeStream(before.launch->stream);
  std::ostringstream text;
  if (before.ofFreedTensor) {
    text << "openreg stream race (memory freed while in use): a tensor used on " << beforeStream
         << " was freed while that work could still run, and its memory was handed out again to a "
            "tensor "
            "used on "
         << nowStream << ".\n";
  } else {
    text << "openreg stream race (" << kind << "): " << nowStream << " and " << beforeStream
         << " use the same memory without waiting for each other.\n";
  }
  text << "  tensor: " << describeTensor(now.sizes, now.dtype)
       << ", device openreg:" << static_cast<int>(now.launch->stream.device_index())
       << ", allocation 0x" << std::hex << report.allocationBegin << std::dec << " ("
       << (report.allocationEnd - report.allocationBegin) << " bytes)\n";
  text << "  this access: " << now.launch->operation << (now.write ? " writes" : " reads")
       << " it on " << nowStream << ", launched at\n"
       << formatStack(*now.launch->stack, "    ");
  text << "  previous access: " << before.launch->operation << (before.write ? " wrote " : " read ")
       << (before.ofFreedTensor
               ? "the freed tensor (" + describeTensor(before.sizes, before.dtype) + ")"
               : "it")
       << " on " << beforeStream << ", launched at\n"
       << formatStack(*before.launch->stack, "    ");
  const std::string waiter = pythonName(now.launch->stream, "waiter");
  const std::string producer = pythonName(before.launch->stream, "producer");
  if (before.ofFreedTensor) {
    text << "  fix: call tensor.record_stream(s) on the freed tensor for the stream s it was used "
            "on ("
         << beforeStream
         << ") before it is freed, so its memory is reused only after that work; or "
         << "synchronize that stream (s.synchronize()) before `del`.";
  } else {
    text << "  fix: before this call, make " << nowStream << " wait for " << beforeStream << ": "
         << waiter << ".wait_stream(" << producer << ")"
         << (now.launch->stream.id() == 0 ? "" : " (the waiter is the stream current at this call)")
         << (before.launch->stream.id() == 0
                 ? ""
                 : " (the producer is the stream current at the previous access)")
         << "; or record an Event on the producer and " << waiter
         << ".wait_event(event); or synchronize the producer first (" << producer
         << ".synchronize()).";
  }
  return text.str();
}

void RaceDetector::publish(std::vector<PendingReport>& found) {
  if (found.empty()) return;
  std::string first;
  for (const PendingReport& report : found) {
    std::string text = format(report);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++statistics_.reports;
      reports_.push_back(text);
      if (reports_.size() > kKeptReports) reports_.pop_front();
    }
    if (first.empty()) first = text;
    // Verbatim: the report already says where; no C++ source location appended.
    if (!raceErrorsRaise()) {
      c10::warn(c10::Warning(c10::Warning::UserWarning(),
                             c10::SourceLocation{__func__, __FILE__, __LINE__}, text,
                             /*verbatim=*/true));
    }
  }
  found.clear();
  TORCH_CHECK(!raceErrorsRaise(), first,
              "\n(raised because races are set to 'error' by OPENREG_DEBUG_RACES or "
              "torch.openreg.debug.set_race_action; 'report' only warns)");
}

void RaceDetector::streamWaited(const c10::Stream& waiter, const c10::Stream& producer) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t w = indexOf(waiter);
  const uint32_t p = indexOf(producer);
  merge(clocks_[w], clocks_[p]);
}

void RaceDetector::eventRecorded(const void* event, const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t index = indexOf(stream);
  merge(clocks_[index], host_);
  events_[event] = clocks_[index];
}

void RaceDetector::streamWaitedForEvent(const c10::Stream& stream, const void* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = events_.find(event);
  if (found == events_.end()) return;
  merge(clocks_[indexOf(stream)], found->second);
}

void RaceDetector::eventSynchronized(const void* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = events_.find(event);
  if (found != events_.end()) merge(host_, found->second);
}

void RaceDetector::streamSynchronized(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t index = indexOf(stream);
  Clock own = clocks_[index];
  if (own.size() <= index) own.resize(index + 1, 0);
  merge(host_, own);
}

void RaceDetector::deviceSynchronized(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].device_index() == device) merge(host_, clocks_[i]);
  }
}

void RaceDetector::memoryAllocated(const void* pointer, size_t bytes, orStream_t stream) {
  const auto handout =
      insideKernel() ? PendingReport::Handout::Kernel : PendingReport::Handout::Host;
  std::vector<PendingReport> found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto begin = reinterpret_cast<uintptr_t>(pointer);
    adopt(begin, begin + bytes, handout, stream, found);
  }
  if (found.empty()) return;
  if (handout == PendingReport::Handout::Host) {
    auto stack = captureStack();
    for (PendingReport& report : found) report.handoutStack = stack;
  }
  publish(found);
}

// Freed memory keeps its accesses, with the streams it was recorded on, for
// whoever gets it next (see inherit()).
void RaceDetector::memoryFreed(const void* pointer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(reinterpret_cast<uintptr_t>(pointer));
  if (found == live_.end()) return;
  Allocation allocation = std::move(found->second);
  live_.erase(found);
  forget(allocation.history);
  if (allocation.history.empty()) return;
  const uintptr_t begin = allocation.begin;
  freed_.erase(begin);
  freed_.emplace(begin, std::move(allocation));
  freedOrder_.push_back(begin);
  while (freedOrder_.size() > kFreedLimit) {
    freed_.erase(freedOrder_.front());
    freedOrder_.pop_front();
  }
}

void RaceDetector::streamRecorded(const void* pointer, const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(reinterpret_cast<uintptr_t>(pointer));
  if (found != live_.end()) found->second.recordedStreams.push_back(stream);
}

RaceStatistics RaceDetector::statistics() {
  std::lock_guard<std::mutex> lock(mutex_);
  return statistics_;
}

std::vector<std::string> RaceDetector::reports() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::vector<std::string>(reports_.begin(), reports_.end());
}

void RaceDetector::clearReports() {
  std::lock_guard<std::mutex> lock(mutex_);
  reports_.clear();
  statistics_.reports = 0;
}

void RaceDetector::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Clock& clock : clocks_) clock.clear();
  host_.clear();
  events_.clear();
  live_.clear();
  freed_.clear();
  freedOrder_.clear();
}

RaceDetector& detector() {
  static auto* instance = new RaceDetector();  // never destroyed: workers may free at exit
  return *instance;
}

}  // namespace

std::shared_ptr<LaunchCompletion> checkLaunch(const std::string& operation,
                                              const c10::Stream& stream,
                                              c10::ArrayRef<at::Tensor> reads,
                                              c10::ArrayRef<at::Tensor> writes) {
  if (insideKernel()) return nullptr;
  return detector().check(operation, stream, reads, writes);
}

void recordResults(const std::string& operation, const c10::Stream& stream,
                   c10::ArrayRef<at::Tensor> writes) {
  if (insideKernel()) return;
  detector().recordResults(operation, stream, writes);
}

void hostWaitedFor(const c10::Stream& stream) {
  if (insideKernel()) return;
  detector().streamSynchronized(stream);
}

void streamWaitedFor(const c10::Stream& waiter, const c10::Stream& producer) {
  if (insideKernel() || waiter == producer) return;
  detector().streamWaited(waiter, producer);
}

void installRaceDetector() { installStreamOrderObserver(&detector()); }

RaceStatistics raceStatistics() { return detector().statistics(); }
std::vector<std::string> raceReports() { return detector().reports(); }
void clearRaceReports() { detector().clearReports(); }
void resetRaceDetector() { detector().reset(); }

}  // namespace torch_openreg
