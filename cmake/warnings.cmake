# SPDX-License-Identifier: MIT
# Warnings for our own targets only (PRIVATE); -Werror when REDIS_LOCK_WERROR is on.
function(redis_lock_warnings target)
  if(MSVC)
    target_compile_options(${target} PRIVATE /W4 $<$<BOOL:${REDIS_LOCK_WERROR}>:/WX>)
  else()
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
      -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
      $<$<BOOL:${REDIS_LOCK_WERROR}>:-Werror>)
  endif()
endfunction()
