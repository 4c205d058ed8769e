// The connection socket of a request, found again, to notice a client that has gone away.
#pragma once

#include <string>

namespace dspark {

// The descriptor of this process's TCP socket connected from remote_addr:remote_port to
// local_port (httplib's Request fields), or -1. The socket stays open while its request's
// handler runs, so the descriptor is valid for that long.
int find_peer_socket(int local_port, const std::string& remote_addr, int remote_port);

// Whether the peer of `fd` closed or reset the connection (without reading or blocking).
bool peer_closed(int fd);

}  // namespace dspark
