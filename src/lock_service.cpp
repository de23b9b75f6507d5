// SPDX-License-Identifier: MIT
// The facade: the Engine the public layer starts operations on (each operation's start_op,
// <redis_lock/detail/initiations.hpp>, is in its op's own file).
#include "lock_service.hpp"

#include <redis_lock/detail/initiations.hpp>  // engine_of, exported as declared there

namespace redis_lock::detail {

Engine& engine_of(LockService& service) noexcept { return service; }

}  // namespace redis_lock::detail
