// SPDX-License-Identifier: MIT
// redis-lock's subcommands, each in a file of its own: run (cmd_run.cpp), status
// (cmd_status.cpp), force-release (cmd_force_release.cpp), observe (cmd_observe.cpp).
#pragma once

#include "options.hpp"
#include "output.hpp"

#include <redis_lock/redis_lock.hpp>

#include <boost/asio/awaitable.hpp>

#include <string>

namespace redis_lock::cli {

/// HOSTNAME:PID, the label stored with each lease this redis-lock takes (what `status`
/// shows): printable ASCII only, at most the library's 128 characters.
std::string holder_label();
/// The manager's options for `o`: the holder label, --accept-evicting-server, and an
/// observer that says each server notice on stderr (an evicting server accepted, or an
/// eviction policy that could not be read).
redis_lock::ManagerOptions manager_options(const Options& o);

/// Runs the command while holding the lock (the default mode).
boost::asio::awaitable<Report> run(const Options& o, redis_lock::ConnectionConfig config);
/// Prints who holds the resource.
boost::asio::awaitable<int> status(const Options& o, redis_lock::ConnectionConfig config);
/// Takes the resource away from whoever holds it.
boost::asio::awaitable<int> force_release(const Options& o, redis_lock::ConnectionConfig config);
/// Prints the election's leader, then each change, until a signal (0), a closed stdout
/// (128+SIGPIPE, as a program killed by it), or (before anything was printed) an error.
boost::asio::awaitable<int> observe(const Options& o, redis_lock::ConnectionConfig config);

}  // namespace redis_lock::cli
