# cmake -P script: one GPU kernel image, from the cache when its key is
# there, else compiled and stored. The key is the SHA-256 of the source, the
# headers it may include, the compiler's version and the flags, so any
# change to any of them compiles afresh. FLAGS is '|'-separated.
string(REPLACE "|" ";" flags "${FLAGS}")
set(key "${VERSION_HASH};${FLAGS};${COMPILER}")
foreach(f ${SRC} ${DEPS})
  file(SHA256 ${f} h)
  string(APPEND key ";${h}")
endforeach()
string(SHA256 key "${key}")
get_filename_component(name ${SRC} NAME_WE)
get_filename_component(ext ${OUT} EXT)
set(cached ${CACHE}/${name}-${key}${ext})
if(EXISTS ${cached})
  file(COPY_FILE ${cached} ${OUT} ONLY_IF_DIFFERENT)
  return()
endif()
execute_process(COMMAND ${COMPILER} -I${INCLUDE} ${flags} -o ${OUT}.tmp ${SRC} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${COMPILER} failed on ${SRC}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
# A cache that cannot be written (a read-only home directory) only costs the
# next build its compile.
execute_process(COMMAND ${CMAKE_COMMAND} -E make_directory ${CACHE} RESULT_VARIABLE dir_rc
                OUTPUT_QUIET ERROR_QUIET)
if(dir_rc EQUAL 0)
  file(COPY_FILE ${OUT} ${cached}.${name}.tmp RESULT copy_rc)
  if(copy_rc EQUAL 0)
    file(RENAME ${cached}.${name}.tmp ${cached} RESULT mv_rc)
  endif()
endif()
