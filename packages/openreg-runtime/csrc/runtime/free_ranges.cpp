// free_ranges.cpp — best fit and coalescing over free offset ranges.
#include "free_ranges.h"

#include <iterator>

namespace openreg::runtime {

std::optional<size_t> FreeRanges::take(size_t length) {
  auto best = freeByLength_.lower_bound({length, 0});
  if (best == freeByLength_.end()) return std::nullopt;
  const auto [freeLength, offset] = *best;
  erase(offset, freeLength);
  if (freeLength > length) give(offset + length, freeLength - length);
  return offset;
}

void FreeRanges::give(size_t offset, size_t length) {
  auto next = freeByOffset_.lower_bound(offset);
  if (next != freeByOffset_.end() && offset + length == next->first) {
    length += next->second;
    erase(next->first, next->second);
  }
  auto following = freeByOffset_.lower_bound(offset);
  if (following != freeByOffset_.begin()) {
    auto previous = std::prev(following);
    if (previous->first + previous->second == offset) {
      offset = previous->first;
      length += previous->second;
      erase(previous->first, previous->second);
    }
  }
  freeByOffset_.emplace(offset, length);
  freeByLength_.emplace(length, offset);
}

void FreeRanges::erase(size_t offset, size_t length) {
  freeByOffset_.erase(offset);
  freeByLength_.erase({length, offset});
}

}  // namespace openreg::runtime
