// SPDX-License-Identifier: MIT
// Umbrella header of redis_lock: everything a user needs, and nothing heavy.
#pragma once

#include <redis_lock/config.hpp>
#include <redis_lock/diagnostics.hpp>
#include <redis_lock/election.hpp>
#include <redis_lock/error.hpp>
#include <redis_lock/lock.hpp>
#include <redis_lock/observer.hpp>
#include <redis_lock/version.hpp>
