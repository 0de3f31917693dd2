# Installs what runs dscached as a system service: the systemd unit (its paths those of this
# install), the sysusers.d entry for the dscache user, an example configuration, and the man
# pages dscached(8) and dscache(1).
set(DSC_BINDIR ${CMAKE_INSTALL_FULL_BINDIR})
set(DSC_SYSCONFDIR ${CMAKE_INSTALL_FULL_SYSCONFDIR})
configure_file(${PROJECT_SOURCE_DIR}/deploy/systemd/dscached.service.in
               ${CMAKE_BINARY_DIR}/deploy/dscached.service @ONLY)
set(DSC_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit is installed (relative to the prefix, or absolute)")
set(DSC_SYSUSERSDIR "lib/sysusers.d" CACHE STRING
    "Where the sysusers.d entry is installed (relative to the prefix, or absolute)")
install(FILES ${CMAKE_BINARY_DIR}/deploy/dscached.service DESTINATION ${DSC_SYSTEMD_UNITDIR})
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/dscache.sysusers DESTINATION ${DSC_SYSUSERSDIR}
        RENAME dscache.conf)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/dscached.json.example
        DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/dscache)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/man/dscached.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/man/dscache.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
