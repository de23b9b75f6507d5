# SPDX-License-Identifier: MIT
# Warnings for our own targets only (PRIVATE); -Werror when REDIS_LOCK_WERROR is on.
# Our own code is also held to Asio's interface without its deprecated parts; a consumer's
# code is not (the define stays PRIVATE: no public header needs it).
function(redis_lock_warnings target)
  target_compile_definitions(${target} PRIVATE BOOST_ASIO_NO_DEPRECATED)
  if(MSVC)
    target_compile_options(${target} PRIVATE /W4 $<$<BOOL:${REDIS_LOCK_WERROR}>:/WX>)
  else()
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
      -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
      $<$<BOOL:${REDIS_LOCK_WERROR}>:-Werror>)
  endif()
endfunction()
