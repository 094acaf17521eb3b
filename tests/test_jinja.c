// test_jinja.c: runtime/jinja*.c, the chat-template engine, against transformers.
//
//   test_jinja FIXTURES_DIR       (tests/fixtures/chat, made by tests/fixtures/make_chat.py)
//
// Every published template there (FAMILY.jinja) renders every conversation of
// FAMILY.expected.json byte for byte as transformers' renderer did, or fails with the message
// it raised. Then one case per construct (whitespace control, expressions, filters, tests,
// loops, macros), the errors a template can make (each with its line and column), and a
// loop of mutated templates that must parse or fail cleanly and never crash.
#include "jinja.h"

#include "check.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *s = malloc((size_t)len + 1);
    *n = fread(s, 1, (size_t)len, f);
    s[*n] = '\0';
    fclose(f);
    return s;
}

// Renders src with the variables of the JSON text vars: the output, or "ERROR: message".
static char *render(const char *src, const char *vars) {
    char err[1024];
    JinjaTemplate *t = jinja_parse("t", src, strlen(src), err, sizeof err);
    char *r = NULL;
    if (t) {
        json_t *v = json_loads(vars ? vars : "{}", 0, NULL);
        JinjaOutput o = {0};
        if (jinja_render(t, v, &o, err, sizeof err) == 0)
            r = strdup(o.text ? o.text : "");
        jinja_output_free(&o);
        json_decref(v);
        jinja_free(t);
    }
    if (!r) {
        r = malloc(strlen(err) + 8);
        sprintf(r, "ERROR: %s", err);
    }
    return r;
}

#define RENDERS(want, src, vars)                                                           \
    do {                                                                                  \
        char *got_ = render(src, vars);                                                   \
        CHECKF(strcmp(got_, want) == 0, "%s\n    want \"%s\"\n    got  \"%s\"", src, want, got_); \
        free(got_);                                                                       \
    } while (0)

// One family's cases: the output, or an error that ends with the template's message.
static void check_family(const char *family) {
    char path[1024];
    size_t n;
    snprintf(path, sizeof path, "%s/%s.jinja", dir, family);
    char *src = slurp(path, &n), err[1024];
    snprintf(path, sizeof path, "%s/%s.expected.json", dir, family);
    json_t *exp = json_load_file(path, 0, NULL);
    CHECK(src && exp);
    JinjaTemplate *t = src ? jinja_parse(family, src, n, err, sizeof err) : NULL;
    CHECKF(t != NULL, "%s: %s", family, err);
    json_t *cases = json_object_get(exp, "cases"), *c;
    size_t i;
    JinjaOutput o = {0};
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *want = json_object_get(c, "output"), *error = json_object_get(c, "error");
        int rc = t ? jinja_render(t, json_object_get(c, "vars"), &o, err, sizeof err) : -1;
        if (want) {
            CHECKF(rc == 0 && o.len == json_string_length(want) && memcmp(o.text, json_string_value(want), o.len) == 0,
                   "%s/%s: want\n%s\n--- got\n%s", family, name, json_string_value(want), rc ? err : o.text);
        } else {
            size_t el = strlen(err), wl = json_string_length(error);
            CHECKF(rc != 0 && el > wl && strcmp(err + el - wl, json_string_value(error)) == 0,
                   "%s/%s: want the error \"%s\", got %s", family, name, json_string_value(error), rc ? err : "none");
        }
    }
    jinja_output_free(&o);
    jinja_free(t);
    json_decref(exp);
    free(src);
}

static void published_templates(void) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int families = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 6 && strcmp(e->d_name + n - 6, ".jinja") == 0) {
            char family[256];
            snprintf(family, sizeof family, "%.*s", (int)(n - 6), e->d_name);
            check_family(family);
            families++;
        }
    }
    if (d)
        closedir(d);
    CHECK(families >= 9);
}

// trim_blocks, lstrip_blocks, - and +, comments, raw, \r\n, the final newline
static void whitespace_control(void) {
    RENDERS("  x\n  y  ",
            "  {% if true %}\n  x\n  {% endif %}\n  y  \n", NULL);
    RENDERS("abc",
            "a  {%- if true -%}  b  {%- endif -%}  c", NULL);
    RENDERS("a\nb\nc",
            "a\n{% if true %}\nb\n{% endif %}\nc", NULL);
    RENDERS("a b\nc",
            "a {%+ if true %}b{% endif +%}\nc", NULL);
    RENDERS("xy",
            "{# note #}\nx {#- strip -#} y", NULL);
    RENDERS("abc",
            "{{ 'a' }}\n{{- 'b' -}}\n {{ 'c' }}\n", NULL);
    RENDERS("1",
            "\t{% set x = 1 %}\n{{ x }}", NULL);
    RENDERS("line\nz\n",
            "line\r\n{% if true %}\r\nz\r\n{% endif %}\r\n", NULL);
    RENDERS("{{ not parsed }}",
            "{% raw %}{{ not parsed }}{% endraw %}", NULL);
}

// literals (escapes, adjacent strings, floats as repr), operators, precedence, ternaries
static void expressions(void) {
    RENDERS("a\tb\néA'q\\",
            "{{ 'a\\tb\\n\\u00e9\\x41\\'q\\\\' }}", NULL);
    RENDERS("dqsq|1000|1500.0|2.0|1e+20|1e-05|0.30000000000000004",
            "{{ \"dq\" 'sq' }}|{{ 1_000 }}|{{ 1.5e3 }}|{{ 2.0 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}", NULL);
    RENDERS("3 -4 2 3.5 1024 7 14",
            "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 * 3 + 1 }} {{ 2 + 3 * 4 }}", NULL);
    RENDERS("ababab [1, 2] a1NoneTrue -3 2",
            "{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true }} {{ -(3) }} {{ true + 1 }}", NULL);
    RENDERS("True False True True True",
            "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}", NULL);
    RENDERS("True x 0 True True",
            "{{ not false and (true or false) }} {{ none or 'x' }} {{ 0 and 'y' }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }}", NULL);
    RENDERS("yes no []",
            "{{ 'yes' if x else 'no' }} {{ 'yes' if y else 'no' }} [{{ 'only' if y }}]", "{\"x\": 1, \"y\": 0}");
    RENDERS("[1, 'a', None, True, 1.5] {'k': 'v', 'n': [1]} ('t', 1)",
            "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ ('t', 1) }}", NULL);
}

// attributes, items, negative indices, slices with steps, on code points
static void access_and_slices(void) {
    RENDERS("user hi |1 3 2",
            "{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ l[0] }} {{ l[-1] }} {{ l.1 }}", "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"l\": [1, 2, 3]}");
    RENDERS("olléh él lo [1, 3] [1, 2, 3] [] h",
            "{{ s[::-1] }} {{ s[1:3] }} {{ s[-2:] }} {{ l[::2] }} {{ l[:-1] }} {{ l[5:] }} {{ s[0] }}", "{\"s\": \"héllo\", \"l\": [1, 2, 3, 4]}");
}

// Python's string and dict methods
static void methods(void) {
    RENDERS("a b|a|a|a|a",
            "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ '\\na\\n'.strip('\\n') }}", NULL);
    RENDERS("['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a,b', 'c'] ['x', 'y ']",
            "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  x y '.split(none, 1) }}", NULL);
    RENDERS("True True a+b+c ab-c",
            "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }}", NULL);
    RENDERS("MIXED WORDS mixed They'Re Here Hello ÉTÉ",
            "{{ 'MiXed wORDs'.upper() }} {{ 'MiXed'.lower() }} {{ \"they're here\".title() }} {{ 'hELLO'.capitalize() }} {{ 'été'.upper() }}", NULL);
    RENDERS("a=1;b=2; ['a', 'b'] [1, 2] 1 dflt None",
            "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}", "{\"d\": {\"a\": 1, \"b\": 2}}");
    RENDERS("2 2 x, y",
            "{{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }} {{ ', '.join(['x', 'y']) }}", NULL);
}

// the filters templates use
static void filters(void) {
    RENDERS("t|3 2 1|5|abAB|Ab Cd|Ab",
            "{{ '  t  ' | trim }}|{{ 'abc' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }}|{{ 5 | string }}|{{ 'Ab' | lower }}{{ 'Ab' | upper }}|{{ 'ab cd' | title }}|{{ 'aB' | capitalize }}", NULL);
    RENDERS("3 4 x 1, 2 12 a b",
            "{{ [3, 4] | first }} {{ [3, 4] | last }} {{ 'xyz' | first }} {{ [1, 2] | join(', ') }} {{ [1, 2] | join }} {{ ms | join(' ', attribute='role') }}", "{\"ms\": [{\"role\": \"a\"}, {\"role\": \"b\"}]}");
    RENDERS("d None d set",
            "{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ y | d('z') }}", "{\"y\": \"set\"}");
    RENDERS("a1 ['a', 'b'] [2, 1]",
            "{% for k, v in {'a': 1} | items %}{{ k }}{{ v }}{% endfor %} {{ 'ab' | list }} {{ [1, 2] | reverse | list }}", NULL);
    RENDERS("[1, 3] 1 [1, 2] ['b']",
            "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }} {{ ms | rejectattr('role', 'equalto', 'user') | list | length }} {{ [0, 1, 2] | select | list }} {{ ['a', 'b'] | reject('equalto', 'a') | list }}", "{\"ms\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"bot\", \"c\": 2}, {\"role\": \"user\", \"c\": 3}]}");
    RENDERS("AB [1, 0]",
            "{{ ['a', 'B'] | map('upper') | join }} {{ ms | map(attribute='x', default=0) | list }}", "{\"ms\": [{\"x\": 1}, {}]}");
    RENDERS("a_b 42 0 3 1.5 3 2.57",
            "{{ 'a-b' | replace('-', '_') }} {{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '1.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }}", NULL);
    RENDERS("{\"a\": [1, 2.5, null, true], \"b\": {}}|{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"b\": {}\n}|[1,2]|\"é\\\"\\n\"|\"\\u00e9\"|{\"a\": 2, \"b\": 1}",
            "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ l | tojson(separators=(',', ':')) }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", "{\"d\": {\"a\": [1, 2.5, null, true], \"b\": {}}, \"l\": [1, 2]}");
}

// `is` tests
static void tests(void) {
    RENDERS("True False True True True True True True True True",
            "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ 3 is number }} {{ l is sequence }}", "{\"x\": 1, \"n\": null, \"s\": \"a\", \"d\": {}, \"l\": []}");
    RENDERS("True False True True True True True True False True True True True",
            "{{ true is boolean }} {{ 1 is boolean }} {{ false is false }} {{ true is true }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is equalto 1 }} {{ 2 is eq(3) }} {{ 'a' is in 'cat' }} {{ 1 is integer }} {{ 1.0 is float }} {{ x is not none }}", "{\"x\": 1}");
}

// the loop variable, filtered loops, else, unpacking, break and continue, per-iteration scope
static void loops(void) {
    RENDERS("1032TrueFalse3[|b] 2121FalseFalse3[a|c] 3210FalseTrue3[b|] ",
            "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}] {% endfor %}", "{\"l\": [\"a\", \"b\", \"c\"]}");
    RENDERS("1a2 2c2 |empty",
            "{% for x in l if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.length }} {% endfor %}|{% for x in [] %}y{% else %}empty{% endfor %}", "{\"l\": [\"a\", \"b\", \"c\"]}");
    RENDERS("3 7 30",
            "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}{% for (a, b) in [(5, 6)] %}{{ a * b }}{% endfor %}", NULL);
    RENDERS("02 [2, 5] [3, 2, 1]",
            "{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %} {{ range(2, 8, 3) | list }} {{ range(3, 0, -1) | list }}", NULL);
    RENDERS("a1-a2+b1-b2+",
            "{% for x in 'ab' %}{% for y in [1, 2] %}{{ x }}{{ y }}{{ loop.cycle('-', '+') }}{% endfor %}{% endfor %}", NULL);
    RENDERS("[1][][]5",
            "{% for i in [1, 2, 3] %}{% if loop.first %}{% set x = 1 %}{% endif %}[{{ x }}]{% endfor %}{% set x = 5 %}{{ x }}", NULL);
    RENDERS("ab",
            "{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}{% for k in undefinedthing %}no{% endfor %}", NULL);
}

// set (tuples, blocks), namespace attributes, macros, dict(), generation blocks
static void set_namespace_macro(void) {
    RENDERS("122[in 1]",
            "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = [1, 2] %}{{ c | length }}{% set block %}in {{ a }}{% endset %}[{{ block }}]", NULL);
    RENDERS("6 True",
            "{% set ns = namespace(n=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }}", NULL);
    RENDERS("Hi Ann! Hi Bob? Hi Cy!",
            "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {{ greet(name='Cy') }}", NULL);
    RENDERS("{'a': 1, 'b': 'x'} 2 4",
            "{{ dict(a=1, b='x') }} {{ namespace(k=2).k }} {{ strftime_now('%Y') | length }}", NULL);
    RENDERS("gen 1",
            "{% generation %}gen {{ 1 }}{% endgeneration %}", NULL);
}

// jinja2's default Undefined: prints nothing, is not defined, has no length
static void undefined(void) {
    RENDERS("[] False 0 ab True True",
            "[{{ nothing }}] {{ nothing is defined }} {{ nothing | length }} {{ 'a' ~ nothing ~ 'b' }} {{ nothing == nothing }} {{ not nothing }}", NULL);
    RENDERS("False True",
            "{{ m.missing is defined }} {{ m.role is defined }}", "{\"m\": {\"role\": \"u\"}}");
}

// The errors a template can make: each at its line and column, with jinja2's words where it
// has them (the template's own for raise_exception), and bounds on what a template may do.
static void errors(void) {
    const char *vars = "{\"m\": {\"role\": \"u\"}, \"x\": 1}";
    RENDERS("ERROR: t:1:11: 'nothing' is undefined", "{{ nothing.attr }}", vars);
    RENDERS("ERROR: t:1:13: 'dict object' has no attribute 'missing'", "{{ m.missing.attr }}", vars);
    RENDERS("ERROR: t:1:12: 'nothing' is undefined", "{{ nothing + 'x' }}", vars);
    RENDERS("ERROR: t:1:7: 'foo' is undefined", "{{ foo() }}", vars);
    RENDERS("ERROR: t:1:8: can only concatenate str (not \"int\") to str", "{{ 'a' + 1 }}", vars);
    RENDERS("ERROR: t:1:6: division by zero", "{{ 1 / 0 }}", vars);
    RENDERS("ERROR: t:1:8: '<' not supported between instances of 'str' and 'int'", "{{ 'a' < 1 }}", vars);
    RENDERS("ERROR: t:1:8: 'NoneType' object is not callable", "{{ none() }}", vars);
    RENDERS("ERROR: t:2:21: Roles must alternate!",
            "{% if true %}\n  {{ raise_exception('Roles must alternate!') }}\n{% endif %}", vars);
    RENDERS("ERROR: t:1:19: cannot assign attribute on non-namespace object ('int')",
            "{% set x = 1 %}{% set x.y = 2 %}", vars);
    RENDERS("ERROR: t:1:4: 'int' object is not iterable", "{% for a, b in [1] %}{% endfor %}", vars);
    RENDERS("ERROR: t:1:4: not enough values to unpack (expected 2, got 1)", "{% for a, b in [[1]] %}{% endfor %}", vars);
    // found when the template is read
    RENDERS("ERROR: t:1:8: no filter named 'nosuchfilter'", "{{ x | nosuchfilter }}", vars);
    RENDERS("ERROR: t:1:9: no test named 'nosuchtest'", "{{ x is nosuchtest }}", vars);
    RENDERS("ERROR: t:3:8: expected a name, not '%}'", "line one\n{% if x %}\n{% for %}", vars);
    RENDERS("ERROR: t:1:4: '{% if %}' is not closed (the template ends before {% endif %})", "{% if true %}open", vars);
    RENDERS("ERROR: t:1:8: expected an expression, not '}}'", "{{ 1 + }}", vars);
    RENDERS("ERROR: t:1:4: '{% endfor %}' without the tag it would close", "{% endfor %}", vars);
    RENDERS("ERROR: t:1:4: unknown tag 'include' (the tags are if, for, set, macro, break, continue, raw, generation)",
            "{% include 'x' %}", vars);
    RENDERS("ERROR: t:1:4: 'break' outside a loop", "{% break %}", vars);
    RENDERS("ERROR: t:1:4: a string is not closed (')", "{{ 'unclosed }}", vars);
    RENDERS("ERROR: t:1:1: a comment ({#) is not closed (#})", "{# open", vars);
    RENDERS("ERROR: t:1:1: the tag opened here is not closed (}})", "{{ x", vars);
    RENDERS("ERROR: t:1:4: the number 99999999999999999999 is too large", "{{ 99999999999999999999 }}", vars);
    // bounds
    RENDERS("ERROR: t:1:24: integer overflow", "{{ 9223372036854775807 + 1 }}", vars);
    RENDERS("ERROR: t:1:9: range too big: more than 100000 items", "{{ range(1000000) | length }}", vars);
    RENDERS("ERROR: t:1:17: the template nests calls deeper than 200",
            "{% macro m(a) %}{{ m(a) }}{% endmacro %}{{ m(1) }}", vars);
    RENDERS("ERROR: t:1:8: a repetition of more than 64 MiB", "{{ 'x' * 100000000 }}", vars);
    RENDERS("ERROR: t:1:32: the template runs more than 10000000 loop iterations and calls",
            "{% for x in range(100000) %}{% for y in range(1000) %}{% endfor %}{% endfor %}", vars);
    RENDERS("ERROR: t:1:12: tojson: the value holds what JSON cannot (Undefined, a namespace, a function, or "
            "nesting past 200)", "{{ nothing | tojson }}", vars);
    char deep[4000] = "{{ ";
    for (int i = 0; i < 300; i++)
        strcat(deep, "not ");
    strcat(deep, "x }}");
    RENDERS("ERROR: t:1:800: the template nests deeper than 200", deep, vars);
}

// Mutated templates (the published ones and the cases above, bytes changed, cut, repeated,
// tags spliced in) parse and render or fail with a message; never a crash, a leak or a hang
// (the sanitized build runs this too).
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void mutate(char *s, size_t *n, size_t cap) {
    static const char *const bits[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "+", "{% for x in messages %}",
                                       "{% endfor %}", "{% if ", "{% else %}", "{% endif %}", "loop.", "|tojson",
                                       "**", "[::-1]", "namespace(", "'", "\"", "\\", "(", ")", "[", "]",
                                       "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", " is ", " not ", "~"};
    size_t at = *n ? next_rand() % *n : 0, len = *n ? next_rand() % 16 : 0;
    switch (next_rand() % 4) {
    case 0:
        if (*n)
            s[at] = (char)(next_rand() % 2 ? "{}%#-+()[]'\"|.,:=~*/ \n"[next_rand() % 23] : (char)next_rand());
        break;
    case 1:
        len = len > *n - at ? *n - at : len;
        memmove(s + at, s + at + len, *n - at - len);
        *n -= len;
        break;
    case 2:
        len = len > *n - at ? *n - at : len;
        if (*n + len < cap) {
            memmove(s + at + len, s + at, *n - at);
            *n += len;
        }
        break;
    default: {
        const char *b = bits[next_rand() % (sizeof bits / sizeof bits[0])];
        size_t k = strlen(b);
        if (*n + k < cap) {
            memmove(s + at + k, s + at, *n - at);
            memcpy(s + at, b, k);
            *n += k;
        }
    }
    }
    s[*n] = '\0';
}

static void fuzz(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen3.expected.json", dir);
    json_t *exp = json_load_file(path, 0, NULL);
    json_t *vars = json_object_get(json_array_get(json_object_get(exp, "cases"), 6), "vars");
    CHECK(vars != NULL);
    static const char *const seeds[] = {"qwen2.5", "qwen3", "llama3.1", "mistral-v0.3", "gemma3", "phi3"};
    JinjaOutput o = {0};
    int parsed = 0, rendered = 0;
    for (int round = 0; round < 2400 && vars; round++) {
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s.jinja", dir, seeds[round % 6]);
        char *src = slurp(path, &n), err[1024];
        size_t cap = n + 4096;
        src = realloc(src, cap);
        for (int k = 1 + (int)(next_rand() % 4); k > 0; k--)
            mutate(src, &n, cap);
        JinjaTemplate *t = jinja_parse("fuzz", src, n, err, sizeof err);
        if (t) {
            parsed++;
            rendered += jinja_render(t, vars, &o, err, sizeof err) == 0;
            jinja_free(t);
        }
        CHECK(t || strncmp(err, "fuzz:", 5) == 0);
        free(src);
    }
    jinja_output_free(&o);
    json_decref(exp);
    printf("  %d of 2400 mutated templates parsed, %d rendered\n", parsed, rendered);
    CHECK(parsed > 100 && rendered > 50);
}

int main(int argc, char **argv) {
    dir = argc > 1 ? argv[1] : "tests/fixtures/chat";
    RUN(published_templates);
    RUN(whitespace_control);
    RUN(expressions);
    RUN(access_and_slices);
    RUN(methods);
    RUN(filters);
    RUN(tests);
    RUN(loops);
    RUN(set_namespace_macro);
    RUN(undefined);
    RUN(errors);
    RUN(fuzz);
    return CHECK_DONE();
}
