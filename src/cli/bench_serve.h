// `dspark bench serve`: the HTTP client's load runs and sweep (src/client) as a command.
#pragma once

namespace dspark {

int bench_serve(int argc, char** argv);

}  // namespace dspark
