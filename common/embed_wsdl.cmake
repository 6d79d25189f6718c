# Writes the WSDL file IN as a C string into OUT: const char *qcg_wsdl_text(void).
file(READ ${IN} wsdl HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${wsdl}")
file(WRITE ${OUT} "/* generated from qcg.wsdl */\nstatic const char wsdl[] = {${bytes} 0};\nconst char *qcg_wsdl_text(void);\nconst char *qcg_wsdl_text(void) { return wsdl; }\n")
