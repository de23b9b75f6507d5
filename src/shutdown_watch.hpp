// SPDX-License-Identifier: MIT
// Layer 4 (engine): learns of an execution context's shutdown, so that guards outliving
// their io_context neither post onto it nor destroy I/O objects of a dead context.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <functional>
#include <memory>

namespace redis_lock::detail {

class Engine;

/// Registers `service` with the context of `executor`: its on_context_shutdown() is called
/// when that context shuts down (if it still lives).
void watch_shutdown(const boost::asio::any_io_executor& executor, std::weak_ptr<Engine> service);

}  // namespace redis_lock::detail
