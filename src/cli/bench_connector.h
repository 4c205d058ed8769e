// `dspark bench connector`: samples per second through the hidden-states store.
#pragma once

namespace dspark {

int bench_connector(int argc, char** argv);

}  // namespace dspark
