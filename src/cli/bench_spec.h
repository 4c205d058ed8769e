// `dspark bench spec`: every prompt run plain and speculatively in one process, with one
// speculative config or several side by side (report: bench_spec_report.h).
#pragma once

namespace dspark {

int bench_spec(int argc, char** argv);

}  // namespace dspark
