// SPDX-License-Identifier: MIT
// Layer 1 (protocol): what one attempt to take a lock is. The topology says which
// (topology.hpp); the acquire's machine (acquire_fsm.hpp) decides by it, knowing no topology.
#pragma once

namespace redis_lock::detail {

enum class Attempt : unsigned char {
  /// One command on the server that serves the lease: a timed-out attempt's reply may come
  /// late on its link (awaited), one whose link failed after the write may have run (given
  /// back here), an outage is waited out within the wait.
  one_server,
  /// A vote of several masters (Redlock's fan-out): it settles its own late replies, gives
  /// back what it took and counts an outage as a vote lost; each attempt after the first
  /// takes a fresh token, and no hand-off message ever grants.
  vote,
};

}  // namespace redis_lock::detail
