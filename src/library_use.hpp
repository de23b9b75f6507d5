// SPDX-License-Identifier: MIT
// Layer 2 (connection), no I/O: how a connection calls our scripts. With FCALL of the
// scripts' Functions library where its server has the library and its user may call it;
// else with EVALSHA, the scripts loaded ahead of the commands. What each handshake asks, and
// what every answer that concerns the library means. Connection is the driver: it sends
// what a Plan says and restates its queue when functions() changes.
// tests/unit/library_use_test.cpp runs it through its rows.
#pragma once

#include "connect_fsm.hpp"
#include "resp.hpp"

#include <optional>
#include <string_view>

namespace redis_lock::detail {

/// | event                              | when                        | then                   |
/// |------------------------------------|-----------------------------|------------------------|
/// | `start_handshake`                  | a library, FCALL not refused | probe it              |
/// |                                    | otherwise                   | SCRIPT LOAD the scripts |
/// | `handshake_answered`               | probe found it              | FCALL                  |
/// |                                    | probe missed, may load (1)  | load first, then again |
/// |                                    | probe missed, may not (2)   | EVALSHA, loads ahead   |
/// |                                    | not probed                  | EVALSHA                |
/// | `on_queued_load` (FUNCTION LOAD)   | loaded, current link        | FCALL from here        |
/// |                                    | NOPERM / unknown command    | not loaded again       |
/// | `on_error` (a command's error)     | the library is gone         | EVALSHA, loads ahead   |
/// |                                    | FCALL refused (NOPERM)      | that, and never probed |
///
/// (1) No write under way, not refused FUNCTION LOAD or FCALL before, not loaded in this
/// handshake already: one more round trip, and the commands then go with FCALL. Sending the
/// library and every script at once had every connection of a fleet that met a server
/// without the library send about 100 KB each.
/// (2) EVALSHA with the scripts' SCRIPT LOADs ahead of the queued commands in the same write
/// (none meets NOSCRIPT, whose resend would put it behind commands sent after it), and ahead
/// of those the library's FUNCTION LOAD, unless this user was refused it or this handshake
/// loaded it and failed: once it is in, the commands that follow go with FCALL.
class LibraryUse {
 public:
  /// What to send once every handshake step is answered, or an error asks for it.
  struct Plan {
    /// Send FUNCTION LOAD as one more handshake step and wait for it (nothing else).
    bool load_first = false;
    /// Otherwise: FUNCTION LOAD of the library ahead of the queued commands.
    bool load_library = false;
    /// And SCRIPT LOAD of each script ahead of them (after the library's load).
    bool load_scripts = false;
  };

  /// `library`: the connection has the scripts' Functions library (set_functions); without
  /// one, every call goes with EVALSHA and the handshake loads the scripts.
  void set_library(bool library) noexcept {
    library_ = library;
    functions_ = library;
  }
  /// How commands call our scripts now, those queued for a link not yet ready too: FCALL
  /// (true) or EVALSHA.
  bool functions() const noexcept { return functions_; }

  /// A handshake starts: whether it calls the library's probe (else it loads the scripts).
  bool start_handshake() noexcept;
  /// A handshake step's reply (only the probe's and FUNCTION LOAD's say anything here).
  void on_handshake_reply(Handshake::Step step, const Reply& reply) noexcept;
  /// Every step of the handshake is answered; `can_write`: nothing is being written on the
  /// link. Sets functions() unless the plan is to load first.
  Plan handshake_answered(bool can_write) noexcept;
  /// A FUNCTION LOAD sent ahead of the commands was answered; `current`: on the link that
  /// still carries them. True when commands go with FCALL from here (functions() is set).
  bool on_queued_load(const Reply& reply, bool current) noexcept;
  /// A command's error reply on a link that calls with FCALL: when it says the library is
  /// gone (FUNCTION FLUSH, DELETE) or may not be called, commands go with EVALSHA from here
  /// (that command is resent with its body: redirect.cpp), with this plan's loads ahead of
  /// what is still queued. None: the error says nothing of the library.
  std::optional<Plan> on_error(std::string_view error) noexcept;

 private:
  /// EVALSHA from here: the loads that go ahead of the queue.
  Plan evalsha() noexcept;

  bool library_ = false;
  bool functions_ = false;              // how queued and new commands call our scripts
  bool probed_ = false;                 // the current handshake asks for the library
  bool found_ = false;                  // its probe (or its FUNCTION LOAD) found it
  bool loaded_in_handshake_ = false;    // it found none, and loaded it before any command
  bool function_load_refused_ = false;  // NOPERM: this user may not load the library
  bool fcall_refused_ = false;          // NOPERM: nor call it (not even asked, after that)
};

}  // namespace redis_lock::detail
