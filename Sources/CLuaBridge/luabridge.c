#include "luabridge.h"
#include <lua.h>
