// parse.c — the parse entry point: the lexer over a source, then the grammar (whose
// actions build the AST through ast.c).
#include "frontend.h"
#include "parser.h"
#include "lexer.h"

Ast *fe_parse(FtSource *src, Arena *a) {
    struct FtLexExtra x = {.src = src, .arena = a, .line = 1, .col = 1};
    yyscan_t scanner;
    if (yylex_init_extra(&x, &scanner) != 0) {
        fprintf(stderr, "ftc: cannot start the lexer\n");
        return NULL;
    }
    if (memchr(src->text, '\0', src->len)) {
        // flex stops at a NUL in a string buffer; say so instead of silently truncating
        const char *z = memchr(src->text, '\0', src->len);
        int line = 1, col = 1;
        for (const char *p = src->text; p < z; p++, col++)
            if (*p == '\n')
                line++, col = 0;
        fe_error(src, (SrcLoc){src->path, line, col, 1}, "NUL byte in source");
        yylex_destroy(scanner);
        return NULL;
    }
    YY_BUFFER_STATE buf = yy_scan_bytes(src->text, (int)src->len, scanner);
    Ast *prog = NULL;
    int rc = yyparse(scanner, &x, &prog);
    yy_delete_buffer(buf, scanner);
    yylex_destroy(scanner);
    return rc == 0 && src->errors == 0 ? prog : NULL;
}
