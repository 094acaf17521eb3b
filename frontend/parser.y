/* parser.y — the .ft grammar. Pure and reentrant, with locations; actions only
 * call the small AST builders. frontend/README.md documents the language. */
%require "3.6"
%define api.pure full
%define parse.error detailed
%locations
%expect 0
%param {yyscan_t scanner}
%parse-param {struct FtLexExtra *px} {Ast **result}

%code requires {
#include "frontend.h"
typedef void *yyscan_t;
}

%code {
int yylex(YYSTYPE *lval, YYLTYPE *lloc, yyscan_t scanner);
static void yyerror(YYLTYPE *loc, yyscan_t scanner, struct FtLexExtra *px, Ast **result,
                    const char *msg);
static SrcLoc L(struct FtLexExtra *px, YYLTYPE l);
static Ast *N(struct FtLexExtra *px, AstKind k, YYLTYPE l);
}

%union {
    int64_t ival;
    double fval;
    const char *str;
    Ast *ast;
}

%token KW_MODEL "model" KW_PARAM "param" KW_BLOCK "block" KW_AS "as"
%token KW_FORWARD "forward" KW_RETURN "return" KW_REPEAT "repeat" KW_TRAIN "train"
%token <ival> INT "integer" SIZE "size" BOOL "boolean"
%token <fval> FLOAT "number"
%token <str> IDENT "identifier" STRING "string"
%token LEX_ERROR "invalid token"

%type <ast> program sections section model_items model_item block_items block_item
%type <ast> stmts stmt inputs_opt inputs input dims_opt dims expr primary args_opt args arg
%type <ast> exprs param dtype_opt train_items train_item

%left '+' '-'
%left '*' '/' '%'
%precedence NEG

%%

/* program = section+ */
program: sections                       { *result = N(px, AST_PROGRAM, @$); (*result)->body = $1; }
       ;
sections: section                       { $$ = $1; }
        | sections section              { $$ = ast_append($1, $2); }
        ;
/* section = "model" IDENT "{" model_item* "}" | "train" "{" train_item* "}" */
section: KW_MODEL IDENT '{' model_items '}'  { $$ = N(px, AST_MODEL, @2); $$->name = $2; $$->body = $4; }
       | KW_TRAIN '{' train_items '}'        { $$ = N(px, AST_TRAIN, @1); $$->body = $3; }
       ;

model_items: %empty                     { $$ = NULL; }
           | model_items model_item     { $$ = ast_append($1, $2); }
           ;
/* model_item = assign | param | block | forward */
model_item: IDENT '=' expr              { $$ = N(px, AST_ASSIGN, @1); $$->name = $1; $$->lhs = $3; }
          | param                       { $$ = $1; }
          | KW_BLOCK IDENT '(' inputs_opt ')' KW_AS STRING '{' block_items '}'
                                        { $$ = N(px, AST_BLOCK, @2); $$->name = $2; $$->inputs = $4;
                                          $$->str = $7; $$->body = $9; }
          | KW_FORWARD '(' inputs_opt ')' '{' stmts '}'
                                        { $$ = N(px, AST_FORWARD, @1); $$->inputs = $3; $$->body = $6; }
          | ';'                         { $$ = NULL; }
          ;

/* param = "param" IDENT dtype? "[" dims "]" "as" STRING */
param: KW_PARAM IDENT dtype_opt '[' dims ']' KW_AS STRING
                                        { $$ = N(px, AST_PARAM, @2); $$->name = $2; $$->args = $5;
                                          $$->str = $8;
                                          if ($3) { $$->dtype = $3->name; $$->dtype_loc = $3->loc; } }
     ;
dtype_opt: %empty                       { $$ = NULL; }
         | IDENT                        { $$ = N(px, AST_IDENT, @1); $$->name = $1; }
         ;

inputs_opt: %empty                      { $$ = NULL; }
          | inputs                      { $$ = $1; }
          ;
inputs: input                           { $$ = $1; }
      | inputs ',' input                { $$ = ast_append($1, $3); }
      ;
/* input = IDENT dtype? "[" dims "]" */
input: IDENT dtype_opt '[' dims ']'     { $$ = N(px, AST_INPUT, @1); $$->name = $1; $$->args = $4;
                                          if ($2) { $$->dtype = $2->name; $$->dtype_loc = $2->loc; } }
     ;
dims_opt: %empty                        { $$ = NULL; }
        | dims                          { $$ = $1; }
        ;
dims: expr                              { $$ = $1; }
    | dims ',' expr                     { $$ = ast_append($1, $3); }
    ;

block_items: %empty                     { $$ = NULL; }
           | block_items block_item     { $$ = ast_append($1, $2); }
           ;
block_item: param                       { $$ = $1; }
          | stmt                        { $$ = $1; }
          ;
stmts: %empty                           { $$ = NULL; }
     | stmts stmt                       { $$ = ast_append($1, $2); }
     ;
/* stmt = IDENT "=" expr | "return" expr */
stmt: IDENT '=' expr                    { $$ = N(px, AST_ASSIGN, @1); $$->name = $1; $$->lhs = $3; }
    | KW_RETURN expr                    { $$ = N(px, AST_RETURN, @1); $$->lhs = $2; }
    | ';'                               { $$ = NULL; }
    ;

train_items: %empty                     { $$ = NULL; }
           | train_items train_item     { $$ = ast_append($1, $2); }
           ;
/* train_item = IDENT "=" expr | IDENT "(" args ")" */
train_item: IDENT '=' expr              { $$ = N(px, AST_ASSIGN, @1); $$->name = $1; $$->lhs = $3; }
          | IDENT '(' args_opt ')'      { Ast *c = N(px, AST_CALL, @1); c->name = $1; c->args = $3;
                                          $$ = N(px, AST_EXPR_STMT, @1); $$->lhs = c; }
          | ';'                         { $$ = NULL; }
          ;

/* expr = expr ("+" | "-" | "*" | "/" | "%") expr | "-" expr | primary */
expr: expr '+' expr                     { $$ = N(px, AST_BINOP, @$); $$->op = '+'; $$->lhs = $1; $$->rhs = $3; }
    | expr '-' expr                     { $$ = N(px, AST_BINOP, @$); $$->op = '-'; $$->lhs = $1; $$->rhs = $3; }
    | expr '*' expr                     { $$ = N(px, AST_BINOP, @$); $$->op = '*'; $$->lhs = $1; $$->rhs = $3; }
    | expr '/' expr                     { $$ = N(px, AST_BINOP, @$); $$->op = '/'; $$->lhs = $1; $$->rhs = $3; }
    | expr '%' expr                     { $$ = N(px, AST_BINOP, @$); $$->op = '%'; $$->lhs = $1; $$->rhs = $3; }
    | '-' expr %prec NEG                { $$ = N(px, AST_NEG, @1); $$->lhs = $2; }
    | primary                           { $$ = $1; }
    ;
/* primary = literal | IDENT | IDENT "(" args ")" | primary "[" args "]" | "(" expr ")"
 *         | "(" expr "," exprs ")" | "[" exprs? "]" | "repeat" "(" expr ")" IDENT "(" args ")" */
primary: INT                            { $$ = N(px, AST_INT, @1); $$->ival = $1; }
       | FLOAT                          { $$ = N(px, AST_FLOAT, @1); $$->fval = $1; }
       | SIZE                           { $$ = N(px, AST_SIZE, @1); $$->ival = $1; }
       | BOOL                           { $$ = N(px, AST_BOOL, @1); $$->ival = $1; }
       | STRING                         { $$ = N(px, AST_STR, @1); $$->name = $1; }
       | IDENT                          { $$ = N(px, AST_IDENT, @1); $$->name = $1; }
       | IDENT '(' args_opt ')'         { $$ = N(px, AST_CALL, @1); $$->name = $1; $$->args = $3; }
       | KW_FORWARD '(' args_opt ')'    { $$ = N(px, AST_CALL, @1); $$->name = "forward"; $$->args = $3; }
       | primary '[' args ']'           { $$ = N(px, AST_INDEX, @2); $$->lhs = $1; $$->args = $3; }
       | '(' expr ')'                   { $$ = $2; }
       | '(' expr ',' exprs ')'         { $$ = N(px, AST_TUPLE, @1); $$->args = ast_append($2, $4); }
       | '[' dims_opt ']'               { $$ = N(px, AST_LIST, @1); $$->args = $2; }
       | KW_REPEAT '(' expr ')' IDENT '(' args_opt ')'
                                        { $$ = N(px, AST_REPEAT, @1); $$->lhs = $3; $$->name = $5;
                                          $$->args = $7; }
       ;
exprs: expr                             { $$ = $1; }
     | exprs ',' expr                   { $$ = ast_append($1, $3); }
     ;
args_opt: %empty                        { $$ = NULL; }
        | args                          { $$ = $1; }
        ;
args: arg                               { $$ = $1; }
    | args ',' arg                      { $$ = ast_append($1, $3); }
    ;
/* arg = (IDENT "=")? expr */
arg: expr                               { $$ = N(px, AST_ARG, @1); $$->lhs = $1; }
   | IDENT '=' expr                     { $$ = N(px, AST_ARG, @1); $$->name = $1; $$->lhs = $3; }
   ;

%%

static SrcLoc L(struct FtLexExtra *px, YYLTYPE l) {
    int len = l.first_line == l.last_line ? l.last_column - l.first_column : 1;
    return (SrcLoc){px->src->path, l.first_line, l.first_column, len > 0 ? len : 1};
}

static Ast *N(struct FtLexExtra *px, AstKind k, YYLTYPE l) { return ast_new(px->arena, k, L(px, l)); }

static void yyerror(YYLTYPE *loc, yyscan_t scanner, struct FtLexExtra *px, Ast **result,
                    const char *msg) {
    (void)scanner, (void)result;
    if (px->src->errors)      /* the lexer already reported an invalid token */
        return;
    fe_error(px->src, L(px, *loc), "%s", msg);
}
