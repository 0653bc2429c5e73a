#ifndef MOONBASE_LUABRIDGE_H
#define MOONBASE_LUABRIDGE_H
typedef struct lb_vm lb_vm;
#endif
