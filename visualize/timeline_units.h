// How the timeline words times and memory, by the trace's units. The puzzle and unit cost models count
// abstract steps and units: times as the puzzles print them ("Timesteps 5.2"), memory as a plain number of
// units. A hardware-model or measured trace is in real seconds and bytes: times with three significant
// digits in s, ms or µs, memory in B, KiB, MiB or GiB, and its heading says "step time", not the puzzles'
// "Timesteps".
#pragma once

#include <string>

#include "sim/time.h"
#include "sim/trace.h"

namespace trainsim::visualize {

/// True when the trace's times are real seconds and its memory bytes: a `hardware` cost model or a measured
/// replay ("measured (cpu)"); false for `puzzle` and `unit` (and an unnamed model).
bool real_units(const Trace& trace);

/// True for a measured replay's trace (its cost model reads "measured (...)").
bool measured_trace(const Trace& trace);

/// A time for labels: with real units "12.2 s", "94.7 ms", "350 µs", "4 s", "0 s" (at most three significant
/// digits, no trailing zeros);
/// otherwise the exact step count, "5.2" (format_time).
std::string time_text(Time t, bool real);

/// A memory amount with its unit: "bytes" as "91.1 MiB", "1.5 GiB", "4 KiB", "512 B" (binary prefixes, at most
/// three significant digits); any other unit as "2621440 units" (format_memory).
std::string memory_text(double v, const std::string& unit);

}  // namespace trainsim::visualize
