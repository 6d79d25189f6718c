# Run by cmake --install (install(CODE) of qcg_install_configured, in
# ../CMakeLists.txt): installs QCG_IC_SRC as QCG_IC_NAME into QCG_IC_DEST with
# the paths of the prefix installed to, so that `cmake --install --prefix P`
# moves them too.  A .in file has @prefix@, @libdir@, @includedir@,
# @version@ replaced; any other (the systemd units, which name a package's
# layout) has /usr/sbin/ and /etc/qcg-connect/ replaced.
foreach(_v SBINDIR SYSCONFDIR LIBDIR INCLUDEDIR DEST)
  if(IS_ABSOLUTE "${QCG_IC_${_v}}")
    set(_qcg_${_v} "${QCG_IC_${_v}}")
  else()
    set(_qcg_${_v} "${CMAKE_INSTALL_PREFIX}/${QCG_IC_${_v}}")
  endif()
endforeach()
file(READ "${QCG_IC_SRC}" _qcg_text)
if(QCG_IC_SRC MATCHES "\\.in$")
  set(prefix "${CMAKE_INSTALL_PREFIX}")
  set(libdir "${_qcg_LIBDIR}")
  set(includedir "${_qcg_INCLUDEDIR}")
  set(version "${QCG_IC_VERSION}")
  string(CONFIGURE "${_qcg_text}" _qcg_text @ONLY)
else()
  string(REPLACE "/usr/sbin/" "${_qcg_SBINDIR}/" _qcg_text "${_qcg_text}")
  string(REPLACE "/etc/qcg-connect/" "${_qcg_SYSCONFDIR}/qcg-connect/" _qcg_text "${_qcg_text}")
endif()
file(WRITE "${QCG_IC_OUT}/${QCG_IC_NAME}" "${_qcg_text}")
file(INSTALL "${QCG_IC_OUT}/${QCG_IC_NAME}" DESTINATION "${_qcg_DEST}")
