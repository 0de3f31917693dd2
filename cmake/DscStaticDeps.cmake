# DSC_STATIC_DEPS=ON (the wheel's build, client/python/_build): the programs and libdscache link
# the static archive (lib<name>.a) of every library pkg-config names for them and of what those
# need in turn (pkg-config --static), so that they run where none of these libraries is
# installed. The imported targets PkgConfig::<X> are rewritten in place, so every target that
# links one is linked the same way. Three exceptions stay shared, and the wheel's build bundles
# them (copied into the wheel, sonames rewritten by patchelf: what readelf -d says is needed):
#   - glibc's own libraries (a static glibc could not dlopen libibverbs or CUDA);
#   - a library with no archive here (Debian ships none for libcjson);
#   - in a shared library (libdscache.so), an archive that a shared object cannot hold: Debian
#     builds some (libturbojpeg, libjpeg, libpng) as PIE, not PIC, objects. Each archive is tried
#     once (linked whole into a throw-away shared object); the executables link it anyway.
# --as-needed: a library that pkg-config --static lists but nothing uses is not needed at run
# time. libibverbs, CUDA and nvJPEG are loaded with dlopen when present and never linked.
if(DSC_STATIC_DEPS)
    add_link_options(-Wl,--as-needed)
    set(_dsc_glibc c m dl rt pthread util resolv)
    set(_dsc_static_report "")
    set(_dsc_shared_report "")
    set(_dsc_exe_only_report "")
    foreach(prefix UV LZ4 XXHASH CJSON SODIUM LIBARCHIVE ZSTD TURBOJPEG LIBJPEG PNG WEBP)
        if(NOT TARGET PkgConfig::${prefix})
            continue()
        endif()
        set(_libs "")
        set(_dirs ${${prefix}_STATIC_LIBRARY_DIRS} ${${prefix}_LIBRARY_DIRS})
        foreach(name ${${prefix}_STATIC_LIBRARIES})
            if(name IN_LIST _dsc_glibc)
                list(APPEND _libs ${name})
                continue()
            endif()
            # libuv's archive is libuv_a.a (Debian's libuv1-dev, libuv-static.pc).
            set(_candidates lib${name}.a)
            if(name STREQUAL "uv")
                list(PREPEND _candidates libuv_a.a)
            endif()
            find_library(DSC_ARCHIVE_${name} NAMES ${_candidates} NAMES_PER_DIR HINTS ${_dirs})
            find_library(DSC_SHARED_${name} NAMES ${name} HINTS ${_dirs})
            mark_as_advanced(DSC_ARCHIVE_${name} DSC_SHARED_${name})
            set(_archive ${DSC_ARCHIVE_${name}})
            set(_shared ${DSC_SHARED_${name}})
            if(NOT _archive AND NOT _shared)
                # pkg-config --static lists every library the whole of it may need (libarchive:
                # libacl, for writing to disk); the link says so if a part used needs it.
                message(STATUS "dscache: lib${name} (for ${prefix}) has neither an archive nor a "
                               "development link here: left out")
                continue()
            endif()
            if(NOT _archive)
                list(APPEND _libs ${_shared})
                list(APPEND _dsc_shared_report ${name})
                continue()
            endif()
            if(NOT DEFINED DSC_ARCHIVE_PIC_${name})
                execute_process(
                    COMMAND ${CMAKE_C_COMPILER} -shared -Wl,--exclude-libs,ALL
                            -o ${CMAKE_BINARY_DIR}/CMakeFiles/dsc_pic_trial.so
                            -Wl,--whole-archive ${_archive} -Wl,--no-whole-archive
                    RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
                if(_rc EQUAL 0)
                    set(DSC_ARCHIVE_PIC_${name} ON CACHE INTERNAL "")
                else()
                    set(DSC_ARCHIVE_PIC_${name} OFF CACHE INTERNAL "")
                endif()
                file(REMOVE ${CMAKE_BINARY_DIR}/CMakeFiles/dsc_pic_trial.so)
            endif()
            if(DSC_ARCHIVE_PIC_${name} OR NOT _shared)
                list(APPEND _libs ${_archive})
                list(APPEND _dsc_static_report ${name})
            else()
                # The consuming target's type decides (evaluated on the target that links).
                list(APPEND _libs "$<IF:$<STREQUAL:$<TARGET_PROPERTY:TYPE>,SHARED_LIBRARY>,${_shared},${_archive}>")
                list(APPEND _dsc_exe_only_report ${name})
            endif()
        endforeach()
        set_property(TARGET PkgConfig::${prefix} PROPERTY INTERFACE_LINK_LIBRARIES "${_libs}")
    endforeach()
    foreach(v _dsc_static_report _dsc_exe_only_report _dsc_shared_report)
        list(REMOVE_DUPLICATES ${v})
        string(REPLACE ";" " " ${v} "${${v}}")
    endforeach()
    message(STATUS "dscache: static archives: ${_dsc_static_report}; in the programs only (not "
                   "position-independent): ${_dsc_exe_only_report}; shared (no archive here): "
                   "${_dsc_shared_report}")
endif()
