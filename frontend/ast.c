// ast.c — AST builders: what the grammar's actions make nodes and lists with.
#include "frontend.h"

Ast *ast_new(Arena *a, AstKind kind, SrcLoc loc) {
    Ast *n = arena_alloc(a, sizeof *n);
    n->kind = kind;
    n->loc = loc;
    return n;
}

Ast *ast_append(Ast *list, Ast *item) {
    if (!list)
        return item;
    if (!item)
        return list;
    Ast *p = list;
    while (p->next)
        p = p->next;
    p->next = item;
    return list;
}

int ast_count(const Ast *list) {
    int n = 0;
    for (; list; list = list->next)
        n++;
    return n;
}
