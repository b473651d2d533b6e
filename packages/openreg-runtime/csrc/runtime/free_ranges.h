// free_ranges.h — free space of an address range, handed out best fit.
//
// Device memory (device_memory.h) and the window where memory imported from
// other processes is mapped (ipc_import.h) both carve page-granular ranges
// out of a fixed span; this is the bookkeeping they share. Free ranges are
// kept twice, by length for best-fit lookup and by offset for coalescing
// with their neighbours. Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace openreg::runtime {

class FreeRanges {
 public:
  // Takes the smallest free range of at least `length` bytes and returns its
  // offset (the rest stays free); nullopt when none is long enough.
  std::optional<size_t> take(size_t length);
  // Returns [offset, offset + length), merging it with free neighbours.
  void give(size_t offset, size_t length);
  // Whether any free range is at least `length` bytes long.
  bool fits(size_t length) const {
    return freeByLength_.lower_bound({length, 0}) != freeByLength_.end();
  }

 private:
  void erase(size_t offset, size_t length);

  std::map<size_t, size_t> freeByOffset_;             // offset -> length
  std::set<std::pair<size_t, size_t>> freeByLength_;  // (length, offset)
};

}  // namespace openreg::runtime
