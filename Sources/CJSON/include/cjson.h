#ifndef MOONBASE_CJSON_H
#define MOONBASE_CJSON_H
#include <stddef.h>
#include <stdint.h>

/// Returns 1 when buf[0..len) is valid UTF-8, else 0 (used by the Lua bridge before handing
/// strings to JSON and by the HTTP layer for bodies).
int cj_utf8_valid(const uint8_t *buf, size_t len);

#endif
