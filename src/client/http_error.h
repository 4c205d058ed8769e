// A cpp-httplib transport error in words (for the files that include <httplib.h>).
#pragma once

#include <httplib.h>

#include <string>

namespace dspark {

std::string transport_error(httplib::Error e);

}  // namespace dspark
