#include "server/peer_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace dspark {

namespace {

// As httplib writes them: numeric host and port.
bool endpoint(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(s);
  return true;
}

}  // namespace

int find_peer_socket(int local_port, const std::string& remote_addr, int remote_port) {
  // httplib does not hand handlers their socket; a request's 4-tuple names it uniquely.
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof local, plen = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (local.ss_family != AF_INET && local.ss_family != AF_INET6) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    std::string lh, ph;
    int lp = 0, pp = 0;
    if (!endpoint(local, llen, lh, lp) || !endpoint(peer, plen, ph, pp)) continue;
    if (lp == local_port && pp == remote_port && ph == remote_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) != 1) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace dspark
