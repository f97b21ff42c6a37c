# flowstate_library(<name> FOLDER <folder> SOURCES ... [USES <flowstate libs>] [EXTERNAL <targets>])
#
# One library per top-level folder. Headers are included as "<folder>/x.h".
# Instead of putting the source root on the include path (which would let any
# file include any folder's headers), each library gets its own include root
# under the build tree holding one symbolic link, <root>/<folder> -> the
# folder. A library sees the headers of itself and of what it lists in USES,
# nothing else: an include that breaks DESIGN.md's dependency direction fails
# to compile. Everything is linked PRIVATE, so each library lists every layer
# it uses directly.
function(flowstate_library name)
  cmake_parse_arguments(A "" "FOLDER" "SOURCES;USES;EXTERNAL" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  set(root ${CMAKE_BINARY_DIR}/include_roots/${name})
  file(MAKE_DIRECTORY ${root})
  if(NOT EXISTS ${root}/${A_FOLDER})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${A_FOLDER} SYMBOLIC)
  endif()
  target_include_directories(${name} PUBLIC ${root})
  target_link_libraries(${name} PRIVATE ${A_USES} ${A_EXTERNAL})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
