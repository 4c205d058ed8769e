// `dspark bench serve`: the serving benchmark client (src/bench) as a command.
#pragma once

namespace dspark {

int bench_serve(int argc, char** argv);

}  // namespace dspark
