#include <sys/types.h>
#include <wslay/wslay.h>

/* RFC 6455 framing (libwslay). Only MoonbaseLiveQuery imports this module. */
