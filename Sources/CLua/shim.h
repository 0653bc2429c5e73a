/* Only CLuaBridge (C) includes this module; no Swift module imports CLua. */
#include <lua.h>
#include <lualib.h>
#include <lauxlib.h>
