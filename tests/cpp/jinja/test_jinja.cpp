// Unit tests of the Jinja interpreter (jinja/*.cpp). Every expected string in the
// tables below is what Python jinja2 3.1 renders with HF transformers' settings; re-verify them
// with `python3 tools/gen_chat_template_golden.py --check-unit-tests` after editing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

#include "errors/error.h"
#include "jinja/template.h"

namespace tq {
namespace {

struct RenderCase {
  const char* name;
  const char* source;
  const char* context;  // JSON object
  const char* expected;
};

// Templates that must fail, with a fragment of the expected message.
struct ErrorCase {
  const char* name;
  const char* source;
  const char* context;
  const char* message;
};

// Sets TQ_FIXED_DATE (read by strftime_now) for one test and restores the previous value.
class ScopedFixedDate {
 public:
  explicit ScopedFixedDate(const char* value) {
    if (const char* previous = std::getenv("TQ_FIXED_DATE")) previous_ = previous;
    if (value != nullptr) {
      setenv("TQ_FIXED_DATE", value, 1);
    } else {
      unsetenv("TQ_FIXED_DATE");
    }
  }
  ~ScopedFixedDate() {
    if (previous_) {
      setenv("TQ_FIXED_DATE", previous_->c_str(), 1);
    } else {
      unsetenv("TQ_FIXED_DATE");
    }
  }

 private:
  std::optional<std::string> previous_;
};

std::string render(const char* source, const char* context_json) {
  return jinja::render(source, nlohmann::ordered_json::parse(context_json));
}

// The message of the tq::Error that rendering throws, or a note that it did not throw.
std::string render_error(const char* source, const char* context_json) {
  try {
    std::string output = render(source, context_json);
    return "<no error; rendered: " + output + ">";
  } catch (const Error& error) {
    return error.what();
  }
}

// clang-format off
const RenderCase kRenderCases[] = {
    {"plain_text", R"j(Hello, world!)j", R"j({})j", R"j(Hello, world!)j"},
    {"trailing_newline_dropped", R"j(line
)j", R"j({})j", R"j(line)j"},
    {"only_one_trailing_newline_dropped", R"j(line

)j", R"j({})j", R"j(line
)j"},
    {"crlf_normalized", R"j(a
b
c)j", R"j({})j", R"j(a
b
c)j"},
    {"variable", R"j(Hello {{ name }}!)j", R"j({"name": "Ada"})j", R"j(Hello Ada!)j"},
    {"dash_strips_both_sides", R"j(a  
  {{- 'b' -}}  
  c)j", R"j({})j", R"j(abc)j"},
    {"block_dash", R"j(x
  {%- if true -%}
  y
  {%- endif -%}
  z)j", R"j({})j", R"j(xyz)j"},
    {"trim_blocks_removes_newline_after_tag", R"j({% if true %}
yes
{% endif %}
after)j", R"j({})j", R"j(yes
after)j"},
    {"lstrip_blocks_strips_indent", R"j(  {% if true %}
    body
  {% endif %}
end)j", R"j({})j", R"j(    body
end)j"},
    {"lstrip_not_for_variables", R"j(  {{ 'v' }}
)j", R"j({})j", R"j(  v)j"},
    {"lstrip_only_whole_line_whitespace", R"j(text {% if true %}x{% endif %})j", R"j({})j", R"j(text x)j"},
    {"plus_disables_lstrip", R"j(  {%+ if true %}x{% endif %})j", R"j({})j", R"j(  x)j"},
    {"plus_disables_trim", R"j({% if true +%}
x{% endif %})j", R"j({})j", R"j(
x)j"},
    {"comment_removed", R"j(a{# comment #}b)j", R"j({})j", R"j(ab)j"},
    {"comment_line_trimmed", R"j(a
  {# comment #}
b)j", R"j({})j", R"j(a
b)j"},
    {"comment_dash", R"j(a  {#- c -#}  b)j", R"j({})j", R"j(ab)j"},
    {"raw_block", R"j({% raw %}{{ not evaluated }}{% if %}{% endraw %})j", R"j({})j", R"j({{ not evaluated }}{% if %})j"},
    {"raw_block_keeps_newline_after_start", R"j({% raw %}
x
{% endraw %}
y)j", R"j({})j", R"j(
x
y)j"},
    {"variable_end_does_not_trim", R"j({{ 'a' }}
b)j", R"j({})j", R"j(a
b)j"},
    {"tag_after_trimmed_tag_line_start", R"j({% if true %}
  {% if true %}
in
  {% endif %}
{% endif %})j", R"j({})j", R"j(in
)j"},
    {"balanced_braces_in_tag", R"j({{ {'a': {'b': 1}}['a'] }})j", R"j({})j", R"j({'b': 1})j"},
    {"multiline_tag", R"j({{
  'a'
  ~ 'b'
}})j", R"j({})j", R"j(ab)j"},
    {"print_list", R"j({{ [1, 'a', none, true, false, 1.5, (1, 2), {'k': 'v'}] }})j", R"j({})j", R"j([1, 'a', None, True, False, 1.5, (1, 2), {'k': 'v'}])j"},
    {"print_tuple_single", R"j({{ (1,) }}|{{ () }}|{{ 1, 2 }})j", R"j({})j", R"j((1,)|()|(1, 2))j"},
    {"print_none_bool", R"j({{ none }} {{ None }} {{ true }} {{ False }})j", R"j({})j", R"j(None None True False)j"},
    {"print_floats", R"j({{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1.5e-7 }} {{ -0.0 }} {{ 123456789.123456789 }})j", R"j({})j", R"j(1.0 0.30000000000000004 1e+16 1000000000000000.0 1e-05 0.0001 1.5e-07 -0.0 123456789.12345679)j"},
    {"print_ints", R"j({{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ -42 }})j", R"j({})j", R"j(1000 31 15 5 -42)j"},
    {"string_escapes", R"j({{ 'tab\there' }}|{{ "q\"uote" }}|{{ 'nl\n' }}|{{ '\u00e9\x41\101' }}|{{ '\q' }})j", R"j({})j", R"j(tab	here|q"uote|nl
|éAA|\q)j"},
    {"adjacent_strings_concatenate", R"j({{ 'a' "b" 'c' }})j", R"j({})j", R"j(abc)j"},
    {"repr_quotes", R"j({{ ["it's", 'say "hi"', "both ' \"", 'a\nb', 'é'] }})j", R"j({})j", R"j(["it's", 'say "hi"', 'both \' "', 'a\nb', 'é'])j"},
    {"repr_control_chars", R"j({{ ['\x00\x7f\xa0\u2028'] }})j", R"j({})j", R"j(['\x00\x7f\xa0\u2028'])j"},
    {"print_dict_order", R"j({{ {'b': 1, 'a': 2} }})j", R"j({})j", R"j({'b': 1, 'a': 2})j"},
    {"print_context_dict", R"j({{ d }})j", R"j({"d": {"z": 1, "a": [true, null, 2.5]}})j", R"j({'z': 1, 'a': [True, None, 2.5]})j"},
    {"print_namespace", R"j({{ namespace(a=1, b='x') }})j", R"j({})j", R"j(<Namespace {'a': 1, 'b': 'x'}>)j"},
    {"print_undefined_is_empty", R"j([{{ missing }}])j", R"j({})j", R"j([])j"},
    {"print_dict_views", R"j({{ {'a': 1}.items() }} {{ {'a': 1}.keys() }} {{ {'a': 1}.values() }})j", R"j({})j", R"j(dict_items([('a', 1)]) dict_keys(['a']) dict_values([1]))j"},
    {"arithmetic", R"j({{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }})j", R"j({})j", R"j(7 9 3.5 3 -4 1 2 1024 0.5 64)j"},
    {"float_arithmetic", R"j({{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ 10 / 4 }} {{ 3 * 1.5 }})j", R"j({})j", R"j(3.0 0.5 2.5 2.5 4.5)j"},
    {"bool_is_int", R"j({{ true + 1 }} {{ true == 1 }} {{ 1 == 1.0 }} {{ false * 3 }})j", R"j({})j", R"j(2 True True 0)j"},
    {"unary", R"j({{ -3 }} {{ +3 }} {{ -(-2) }} {{ not true }} {{ not 0 }})j", R"j({})j", R"j(-3 3 2 False True)j"},
    {"string_ops", R"j({{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'a' ~ 1 ~ none ~ missing }})j", R"j({})j", R"j(abcd ababab xxx a1None)j"},
    {"list_ops", R"j({{ [1] + [2, 3] }} {{ [0] * 3 }} {{ (1,) + (2,) }})j", R"j({})j", R"j([1, 2, 3] [0, 0, 0] (1, 2))j"},
    {"percent_format", R"j({{ '%s-%d' % ('a', 3) }}|{{ '%5.2f' % 3.14159 }}|{{ '%(x)s!' % {'x': 'hi'} }}|{{ '%x %o %r %%' % (255, 8, 'q') }}|{{ '%-4d|%05d' % (7, -42) }})j", R"j({})j", R"j(a-3| 3.14|hi!|ff 10 'q' %|7   |-0042)j"},
    {"comparisons", R"j({{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 != 1.0 }})j", R"j({})j", R"j(True True False True True True False False)j"},
    {"equality_containers", R"j({{ [1, 2] == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ (1, 2) == [1, 2] }} {{ none == none }})j", R"j({})j", R"j(True True False True)j"},
    {"membership", R"j({{ 1 in [1, 2] }} {{ 'b' in 'abc' }} {{ 'a' in {'a': 1} }} {{ 3 not in [1] }} {{ 'x' not in 'abc' }} {{ 'a' in missing }})j", R"j({})j", R"j(True True True True True False)j"},
    {"and_or_return_operands", R"j({{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }} {{ 1 and 0 or 5 }})j", R"j({})j", R"j(x b  [] 5)j"},
    {"conditional_expression", R"j({{ 'y' if true else 'n' }}|{{ 'y' if false else 'n' }}|{{ 'y' if false }}|{{ 1 if 0 else 2 if 1 else 3 }})j", R"j({})j", R"j(y|n||2)j"},
    {"operator_precedence_filters", R"j({{ items|length - 1 }} {{ -3|abs }} {{ 'a' ~ 'b'|upper }} {{ not x is defined }})j", R"j({"items": [1, 2, 3]})j", R"j(2 3 aB True)j"},
    {"undefined_equality", R"j({{ missing == missing }} {{ missing == none }} {{ missing != 'a' }})j", R"j({})j", R"j(True False True)j"},
    {"attribute_and_item", R"j({{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ m['missing'] }}|)j", R"j({"m": {"role": "user", "content": "hi"}})j", R"j(user hi ||)j"},
    {"list_index", R"j({{ xs[0] }} {{ xs[-1] }} {{ xs.1 }} [{{ xs[10] }}])j", R"j({"xs": ["a", "b", "c"]})j", R"j(a c b [])j"},
    {"slicing", R"j({{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ 'hello'[1:3] }} {{ 'héllo'[::-1] }} {{ (1, 2, 3)[1:] }})j", R"j({"xs": [1, 2, 3, 4]})j", R"j([2, 3, 4] [1, 2] [4, 3, 2, 1] [1, 3] [3, 4] el olléh (2, 3))j"},
    {"dict_method_beats_key", R"j({{ d.items()|list }} {{ d['items'] }})j", R"j({"d": {"items": "key"}})j", R"j([('items', 'key')] key)j"},
    {"string_index_unicode", R"j({{ s[0] }}{{ s[1] }}{{ s[-1] }} {{ s|length }})j", R"j({"s": "é中🎉"})j", R"j(é中🎉 3)j"},
    {"nested_access", R"j({{ messages[0].tool_calls[0].function.name }})j", R"j({"messages": [{"tool_calls": [{"function": {"name": "f"}}]}]})j", R"j(f)j"},
    {"none_attribute_is_undefined", R"j([{{ none.foo }}])j", R"j({})j", R"j([])j"},
    {"loop_over_dict_keys", R"j({% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %})j", R"j({})j", R"j(ba)j"},
    {"str_methods_case", R"j({{ 'Hello World'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'AbC'.swapcase() }})j", R"j({})j", R"j(HELLO WORLD hello Hello World Hello aBc)j"},
    {"str_methods_strip", R"j([{{ '  x  '.strip() }}][{{ 'xxyxx'.strip('x') }}][{{ '\n\nx\n'.lstrip('\n') }}][{{ 'x\n\n'.rstrip() }}][{{ '\u3000x\xa0'.strip() }}])j", R"j({})j", R"j([x][y][x
][x][x])j"},
    {"str_methods_split", R"j({{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\nb\r\nc'.splitlines() }} {{ 'x</think>y</think>z'.split('</think>')[-1] }})j", R"j({})j", R"j(['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c'] ['a', 'b', 'c'] z)j"},
    {"str_methods_search", R"j({{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'aaa'.count('a') }} {{ 'é-x'.find('x') }})j", R"j({})j", R"j(True True 2 5 3 2)j"},
    {"str_methods_replace_join", R"j({{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', 'L', 1) }} {{ ', '.join(['a', 'b']) }} {{ 'ab'.replace('', '-') }})j", R"j({})j", R"j(heLLo heLlo a, b -a-b-)j"},
    {"str_methods_predicates", R"j({{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ ' \t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ''.isdigit() }})j", R"j({})j", R"j(True True True True True True False)j"},
    {"str_methods_misc", R"j({{ 'x'.center(5, '*') }} {{ 'x'.ljust(3, '.') }} {{ 'x'.rjust(3) }} {{ '42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }})j", R"j({})j", R"j(**x** x..   x 00042 ('a', '=', 'b=c') x)j"},
    {"unicode_case", R"j({{ 'straße'|upper }} {{ 'ΟΔΟΣ ΣΑΣ'|lower }} {{ 'ǆemal'|capitalize }} {{ 'ﬁx'.upper() }} {{ 'ÉCOLE'.lower() }})j", R"j({})j", R"j(STRASSE οδος σας ǅemal FIX école)j"},
    {"dict_methods", R"j({{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys()|list }} {{ d.values()|list }}{% for k, v in d.items() %} {{ k }}={{ v }}{% endfor %})j", R"j({"d": {"a": 1, "b": 2}})j", R"j(1 None 0 ['a', 'b'] [1, 2] a=1 b=2)j"},
    {"list_methods", R"j({{ [1, 2, 2].count(2) }} {{ ['a', 'b'].index('b') }})j", R"j({})j", R"j(2 1)j"},
    {"tests_types", R"j({{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ none is none }} {{ {} is mapping }} {{ [] is mapping }})j", R"j({})j", R"j(True True True True True False True True True True False)j"},
    {"tests_defined", R"j({{ x is defined }} {{ x is undefined }} {{ y is defined }} {{ y is not none }} {{ z is none }})j", R"j({"y": 1, "z": null})j", R"j(False True True True True)j"},
    {"tests_sequence_iterable", R"j({{ 'a' is iterable }} {{ [] is iterable }} {{ 1 is iterable }} {{ {} is iterable }} {{ missing is iterable }} {{ 'a' is sequence }} {{ 1 is sequence }} {{ {} is sequence }})j", R"j({})j", R"j(True True False True True True False True)j"},
    {"tests_numbers", R"j({{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }})j", R"j({})j", R"j(True True True False)j"},
    {"tests_bool_literals", R"j({{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is true }})j", R"j({})j", R"j(True False True False)j"},
    {"tests_comparison", R"j({{ 2 is eq 2 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 'a' is in 'abc' }} {{ 2 is equalto 2 }} {{ 2 is sameas 2 }})j", R"j({})j", R"j(True True True False True False True True True)j"},
    {"tests_case", R"j({{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }})j", R"j({})j", R"j(True True False)j"},
    {"tests_callable_filter", R"j({{ range is callable }} {{ 'x' is callable }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }})j", R"j({})j", R"j(True False True True False)j"},
    {"is_not", R"j({{ x is not defined }} {{ 1 is not string }})j", R"j({})j", R"j(True True)j"},
    {"filter_trim", R"j([{{ '  a  '|trim }}][{{ 'xxaxx'|trim('x') }}])j", R"j({})j", R"j([a][a])j"},
    {"filter_case", R"j({{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hello world-wide (x) [y] <z>q'|title }} {{ "they're"|title }} {{ 'hELLO wORLD'|capitalize }})j", R"j({})j", R"j(ABC abc Hello World-Wide (X) [Y] <Z>q They're Hello world)j"},
    {"filter_length_count", R"j({{ [1, 2]|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ missing|length }})j", R"j({})j", R"j(2 5 1 0)j"},
    {"filter_first_last", R"j({{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}])j", R"j({})j", R"j(1 3 a c [])j"},
    {"filter_join", R"j({{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ users|join(', ', attribute='name') }})j", R"j({"users": [{"name": "a"}, {"name": "b"}]})j", R"j(1, 2, 3 ab a, b)j"},
    {"filter_default", R"j({{ missing|default('d') }} {{ none|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|d(5, boolean=true) }} [{{ missing|d }}])j", R"j({})j", R"j(d None  d 5 [])j"},
    {"filter_tojson", R"j({{ {'a': [1, 2.0, 'x', none, true], 'b': {'c': 'é"\n\t'}}|tojson }})j", R"j({})j", R"j({"a": [1, 2.0, "x", null, true], "b": {"c": "é\"\n\t"}})j"},
    {"filter_tojson_indent", R"j({{ {'a': [1, {}], 'b': [], 'c': {'d': 'e'}}|tojson(indent=2) }})j", R"j({})j", R"j({
  "a": [
    1,
    {}
  ],
  "b": [],
  "c": {
    "d": "e"
  }
})j"},
    {"filter_tojson_options", R"j({{ {'b': 1, 'a': [1, 2]}|tojson(sort_keys=true) }} {{ [1, {'a': 2}]|tojson(separators=(',', ':')) }} {{ ['é', '😀']|tojson(ensure_ascii=true) }} {{ 'x'|tojson }} {{ 1.0|tojson }} {{ {'a': 1}|tojson(indent='\t') }})j", R"j({})j", R"j({"a": [1, 2], "b": 1} [1,{"a":2}] ["\u00e9", "\ud83d\ude00"] "x" 1.0 {
	"a": 1
})j"},
    {"filter_tojson_context_order", R"j({{ tool|tojson }})j", R"j({"tool": {"name": "f", "description": "d", "parameters": {"type": "object", "required": []}}})j", R"j({"name": "f", "description": "d", "parameters": {"type": "object", "required": []}})j"},
    {"filter_string_int_float", R"j({{ 12|string }} {{ '42'|int }} {{ ' 42 '|int }} {{ '4.5'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(base=16) }} {{ '4.5'|float }} {{ 3|float }} {{ 'x'|float }} {{ true|int }})j", R"j({})j", R"j(12 42 42 4 0 7 3 26 4.5 3.0 0.0 1)j"},
    {"filter_list_items", R"j({{ 'abc'|list }} {{ {'a': 1}|list }} {{ {'a': 1, 'b': 2}|items|list }} {{ (1, 2)|list }})j", R"j({})j", R"j(['a', 'b', 'c'] ['a'] [('a', 1), ('b', 2)] [1, 2])j"},
    {"filter_replace", R"j({{ 'hello'|replace('l', 'L') }} {{ 'hello'|replace('l', 'L', 1) }} {{ 'aaa'|replace('a', 'b', count=2) }})j", R"j({})j", R"j(heLLo heLlo bba)j"},
    {"filter_round_abs", R"j({{ 3.7|round }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 3.1|round(0, 'ceil') }} {{ 3.9|round(method='floor') }} {{ -2|abs }} {{ -2.5|abs }})j", R"j({})j", R"j(4.0 2.0 4.0 2.67 3 4.0 3.0 2 2.5)j"},
    {"filter_map", R"j({{ users|map(attribute='name')|list }} {{ [1, 2]|map('string')|list }} {{ ['a', 'b']|map('upper')|join }} {{ users|map(attribute='age', default=0)|list }} {{ [[1, 2], [3]]|map('length')|list }})j", R"j({"users": [{"name": "a", "age": 3}, {"name": "b"}]})j", R"j(['a', 'b'] ['1', '2'] AB [3, 0] [2, 1])j"},
    {"filter_select_reject", R"j({{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 5, 10]|select('gt', 3)|list }})j", R"j({})j", R"j([1, 3] [2, 4] [1, 'a'] [5, 10])j"},
    {"filter_selectattr", R"j({{ ms|selectattr('role', 'eq', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('role', 'equalto', 'user')|list|length }} {{ ms|selectattr('flag')|list|length }})j", R"j({"ms": [{"role": "user", "content": "a", "flag": true}, {"role": "assistant", "content": "b"}]})j", R"j(['a'] 1 1)j"},
    {"filter_unique_sort_reverse", R"j({{ [3, 1, 2, 1]|unique|list }} {{ ['A', 'a', 'b']|unique|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }})j", R"j({})j", R"j([3, 1, 2] ['A', 'b'] [1, 2, 3] ['A', 'a', 'b'] [3, 2, 1] [3, 2, 1] cba)j"},
    {"filter_sort_attribute", R"j({{ users|sort(attribute='age')|map(attribute='name')|join(',') }})j", R"j({"users": [{"name": "a", "age": 30}, {"name": "b", "age": 20}, {"name": "c", "age": 25}]})j", R"j(b,c,a)j"},
    {"filter_dictsort", R"j({{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }})j", R"j({})j", R"j([('A', 2), ('a', 3), ('b', 1)] [('a', 2), ('b', 1)])j"},
    {"filter_min_max_sum", R"j({{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ [1, 2, 3]|sum }} {{ [{'x': 1.5}, {'x': 2}]|sum(attribute='x') }} {{ [1]|sum(start=10) }})j", R"j({})j", R"j(1 3 A 6 3.5 11)j"},
    {"filter_indent", R"j({{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x'|indent('> ', first=true) }})j", R"j({})j", R"j(a
    b

    c|  a
  b|a
  
  b|> x)j"},
    {"filter_wordcount_truncate_center", R"j({{ 'Hello, world! 123 _x'|wordcount }} {{ 'a b c d e f g h i j k l m n o p'|truncate(9) }} {{ 'abcdefghijklmnopqrstuvwxyz'|truncate(10, true) }} [{{ 'x'|center(5) }}])j", R"j({})j", R"j(4 a b c... abcdefg... [  x  ])j"},
    {"filter_escape_safe", R"j({{ '<a href="x">&\'</a>'|escape }} {{ '<b>'|e }} {{ '<b>'|safe }})j", R"j({})j", R"j(&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; &lt;b&gt; <b>)j"},
    {"filter_format_batch", R"j({{ '%s and %s'|format('a', 'b') }} {{ '%(x)s'|format(x=1) }} {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }})j", R"j({})j", R"j(a and b 1 [[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']])j"},
    {"filter_attr", R"j({{ 'ab'|attr('upper') is callable }} [{{ {'a': 1}|attr('a') }}])j", R"j({})j", R"j(True [])j"},
    {"filter_chain", R"j({{ '  Hello World  '|trim|lower|replace('world', 'there')|title }})j", R"j({})j", R"j(Hello There)j"},
    {"filter_block", R"j({% filter upper %}hello {{ name }}{% endfilter %})j", R"j({"name": "bob"})j", R"j(HELLO BOB)j"},
    {"for_loop_vars", R"j({% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %})j", R"j({})j", R"j(1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 )j"},
    {"for_prev_next_cycle", R"j({% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }}]{% endfor %})j", R"j({})j", R"j([|2|a][1|3|b][2||a])j"},
    {"for_changed", R"j({% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %})j", R"j({})j", R"j(True False True False True )j"},
    {"for_else", R"j({% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}x{% else %}empty{% endfor %})j", R"j({})j", R"j(empty|x)j"},
    {"for_filter", R"j({% for x in range(10) if x is odd %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %} {% for x in [1, 2] if x > 5 %}x{% else %}none{% endfor %})j", R"j({})j", R"j(1,3,5,7,9 none)j"},
    {"for_unpack", R"j({% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }}{% endfor %} {% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %} {% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %})j", R"j({})j", R"j(1234 x1 123)j"},
    {"for_reversed_slice", R"j({% for m in ms[::-1] %}{{ m }}{{ (ms|length - 1) - loop.index0 }} {% endfor %})j", R"j({"ms": ["a", "b", "c"]})j", R"j(c2 b1 a0 )j"},
    {"for_nested_loop_var", R"j({% for a in [1, 2] %}{% for b in [1, 2] %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %})j", R"j({})j", R"j(121;122;)j"},
    {"for_break_continue", R"j({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})j", R"j({})j", R"j(0134)j"},
    {"for_over_undefined_and_string", R"j([{% for x in missing %}x{% endfor %}]{% for ch in 'hé' %}<{{ ch }}>{% endfor %})j", R"j({})j", R"j([]<h><é>)j"},
    {"loop_scope_does_not_leak", R"j({% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}|{{ x }})j", R"j({})j", R"j(outer1outer2|outer)j"},
    {"loop_iteration_scope_fresh", R"j({% for i in [1, 2] %}[{{ y }}]{% set y = i %}{% endfor %})j", R"j({})j", R"j([][])j"},
    {"if_scope_leaks", R"j({% if true %}{% set x = 1 %}{% endif %}{{ x }})j", R"j({})j", R"j(1)j"},
    {"namespace_in_loop", R"j({% set ns = namespace(total=0, names=[]) %}{% for x in [1, 2, 3] %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }} {{ ns.missing }}|)j", R"j({})j", R"j(6 |)j"},
    {"range_global", R"j({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }})j", R"j({})j", R"j([0, 1, 2] [1, 3, 5] [5, 3, 1])j"},
    {"dict_global", R"j({{ dict(a=1, b='x') }} {{ dict([('k', 1)]) }})j", R"j({})j", R"j({'a': 1, 'b': 'x'} {'k': 1})j"},
    {"joiner_cycler", R"j({% set pipe = joiner(' | ') %}{% for x in 'abc' %}{{ pipe() }}{{ x }}{% endfor %} {% set cy = cycler('odd', 'even') %}{% for x in 'abc' %}{{ cy.next() }}{% endfor %})j", R"j({})j", R"j(a | b | c oddevenodd)j"},
    {"if_elif_else", R"j({% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %})j", R"j({})j", R"j(one two many )j"},
    {"set_tuple_and_block", R"j({% set a, b = 1, 2 %}{{ a }}{{ b }} {% set block %}inner {{ a }}{% endset %}[{{ block }}] {% set up | upper %}shout{% endset %}{{ up }})j", R"j({})j", R"j(12 [inner 1] SHOUT)j"},
    {"set_block_scope", R"j({% set y %}{% set z = 1 %}b{% endset %}[{{ y }}{{ z }}])j", R"j({})j", R"j([b])j"},
    {"macro_defaults_kwargs", R"j({% macro tag(name, cls='x', body='') %}<{{ name }} class={{ cls }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('p') }}{{ tag('b', body='hi') }}{{ tag('i', 'y', 'z') }})j", R"j({})j", R"j(<p class=x></p><b class=x>hi</b><i class=y>z</i>)j"},
    {"macro_missing_arg_undefined", R"j({% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }})j", R"j({})j", R"j([1||False])j"},
    {"macro_sees_later_globals", R"j({% macro m() %}{{ g }}{% endmacro %}{% set g = 7 %}{{ m() }})j", R"j({})j", R"j(7)j"},
    {"macro_recursion", R"j({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})j", R"j({})j", R"j(120)j"},
    {"call_block", R"j({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('div') %}content {{ 1 + 1 }}{% endcall %})j", R"j({})j", R"j(<div>content 2</div>)j"},
    {"call_block_with_args", R"j({% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %})j", R"j({})j", R"j([1][2])j"},
    {"with_block", R"j({% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}])j", R"j({})j", R"j(3[])j"},
    {"generation_block", R"j({% generation %}gen {{ 1 }}{% endgeneration %})j", R"j({})j", R"j(gen 1)j"},
    {"print_statement", R"j({% print 'x' ~ 1 %})j", R"j({})j", R"j(x1)j"},
    {"raise_exception_not_reached", R"j({% if false %}{{ raise_exception('no') }}{% endif %}ok)j", R"j({})j", R"j(ok)j"},
    {"strftime_now_fixed", R"j({{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %j %B %a %%') }})j", R"j({})j", R"j(26 Jul 2024|2024-07-26 00:00:00 Friday 208 July Fri %)j"},
    {"messages_loop", R"j({% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})j", R"j({"messages": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}], "add_generation_prompt": true})j", R"j(<|im_start|>user
hi<|im_end|>
<|im_start|>assistant
yo<|im_end|>
<|im_start|>assistant
)j"},
    {"think_split", R"j({% set c = m.split('</think>')[-1].lstrip('\n') %}{% set r = m.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}[{{ r }}][{{ c }}])j", R"j({"m": "<think>\nreason\n</think>\n\nanswer"})j", R"j([reason][answer])j"},
    {"scoping_root_store_hides_context_in_loop", R"j({% for i in [1] %}[{{ a }}]{% endfor %}{% set a = 'new' %}{{ a }})j", R"j({"a": "A"})j", R"j([]new)j"},
    {"scoping_root_load_first_keeps_context", R"j({{ a }}{% for i in [1] %}[{{ a }}]{% endfor %}{% set a = 'new' %}{{ a }})j", R"j({"a": "A"})j", R"j(A[A]new)j"},
    {"scoping_macro_sees_current_value", R"j({% macro m() %}[{{ a }}]{% endmacro %}{{ m() }}{% set a = 'new' %}{{ m() }})j", R"j({"a": "A"})j", R"j([][new])j"},
    {"scoping_conditional_store_keeps_context", R"j({% for i in [1] %}[{{ a }}]{% endfor %}{% if x %}{% set a = 1 %}{% elif y %}{% set a = 2 %}{% else %}{% set a = 3 %}{% endif %}{{ a }})j", R"j({"a": "A"})j", R"j([A]3)j"},
    {"scoping_nested_frame_store", R"j({% for i in [1] %}{% for j in [1] %}[{{ a }}]{% endfor %}{% set a = 1 %}{% endfor %})j", R"j({"a": "A"})j", R"j([])j"},
    {"scoping_set_block_frame", R"j({% set blk %}[{{ a }}]{% endset %}{{ blk }}{% set a = 'new' %})j", R"j({"a": "A"})j", R"j([])j"},
    {"filter_select_falsy_input", R"j({{ false|select|list }} {{ none|reject('odd')|list }} {{ 0|map('string')|list }})j", R"j({})j", R"j([] [] [])j"},
    {"filter_truncate_non_string", R"j({{ [1, 2]|truncate(5) }} [{{ missing|truncate }}])j", R"j({})j", R"j([1, 2] [])j"},
    {"percent_single_container_argument", R"j({{ 'x' % [1] }} {{ 'x' % {'a': 1} }} {{ '%s' % [1, 2] }} {{ '' % missing }})j", R"j({})j", R"j(x x [1, 2] )j"},
    {"undefined_is_callable", R"j({{ missing is callable }} {{ loop is callable }})j", R"j({})j", R"j(True True)j"},
    {"namespace_containing_itself", R"j({% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ [ns] }}|{{ ns.me.me.a }})j", R"j({})j", R"j(<Namespace {'a': 1, 'me': <Namespace {...}>}>|[<Namespace {'a': 1, 'me': <Namespace {...}>}>]|1)j"},
    {"break_in_filter_block", R"j({% for x in [1, 2, 3] %}{% filter upper %}a{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfilter %}{% endfor %})j", R"j({})j", R"j(A1)j"},
    {"continue_in_set_block", R"j({% for x in [1, 2, 3] %}{% set b %}a{{ x }}{% if x == 2 %}{% continue %}{% endif %}{% endset %}{{ b }}{% endfor %})j", R"j({})j", R"j(a1a3)j"},
    {"break_in_with_block", R"j({% for x in [1, 2, 3] %}{% with y = x %}{{ y }}{% if y == 2 %}{% break %}{% endif %}{% endwith %}{% endfor %})j", R"j({})j", R"j(12)j"},
};

const ErrorCase kErrorCases[] = {
    {"unclosed_if", R"j({% if true %}x)j", R"j({})j", "chat template line 1: unexpected end of template"},
    {"unclosed_for_reports_line", R"j(a
b
{% for x in y %}
c)j", R"j({})j", "chat template line 4"},
    {"unknown_tag", R"j({% frobnicate %})j", R"j({})j", "chat template line 1: unknown tag 'frobnicate'"},
    {"mismatched_end_tag", R"j({% if true %}{% endfor %})j", R"j({})j", "unknown tag 'endfor'"},
    {"extends_unsupported", R"j({% extends 'base.html' %})j", R"j({})j", "chat template line 1: unsupported tag '{% extends %}'"},
    {"include_unsupported", R"j(line
{% include 'x' %})j", R"j({})j", "chat template line 2: unsupported tag '{% include %}'"},
    {"import_unsupported", R"j({% import 'forms.html' as forms %})j", R"j({})j", "unsupported tag '{% import %}'"},
    {"from_import_unsupported", R"j({% from 'forms.html' import input %})j", R"j({})j", "unsupported tag '{% from %}'"},
    {"do_tag_unknown", R"j({% do xs.append(1) %})j", R"j({})j", "unknown tag 'do'"},
    {"unknown_filter", R"j({{ x|frobnicate }})j", R"j({})j", "chat template line 1: no filter named 'frobnicate'"},
    {"unknown_test", R"j({{ x is frobnicated }})j", R"j({})j", "no test named 'frobnicated'"},
    {"unterminated_string", R"j({{ 'abc }})j", R"j({})j", "unterminated string literal"},
    {"unclosed_comment", R"j({# never closed)j", R"j({})j", "missing end of comment tag"},
    {"unexpected_char", R"j({{ a @ b }})j", R"j({})j", "unexpected character '@'"},
    {"unbalanced_bracket", R"j({{ [1, 2) }})j", R"j({})j", "unexpected ')'"},
    {"missing_expression", R"j({{ }})j", R"j({})j", "expected an expression"},
    {"break_outside_loop", R"j({% break %})j", R"j({})j", "'break' outside of a loop"},
    {"undefined_attribute_error", R"j({{ missing.attr }})j", R"j({})j", "'missing' is undefined"},
    {"undefined_arithmetic_error", R"j(line1
{{ missing + 1 }})j", R"j({})j", "chat template line 2: 'missing' is undefined"},
    {"undefined_call_error", R"j({{ missing() }})j", R"j({})j", "'missing' is undefined"},
    {"missing_key_then_attribute", R"j({{ m.a.b }})j", R"j({"m": {}})j", "'dict object' has no attribute 'a'"},
    {"type_error_add", R"j({{ 1 + 'a' }})j", R"j({})j", "unsupported operand type(s) for +: 'int' and 'str'"},
    {"type_error_concat", R"j({{ 'a' + 1 }})j", R"j({})j", "can only concatenate str (not \"int\") to str"},
    {"type_error_compare", R"j({{ 1 < 'a' }})j", R"j({})j", "'<' not supported between instances of 'int' and 'str'"},
    {"division_by_zero", R"j({{ 1 / 0 }})j", R"j({})j", "ZeroDivisionError"},
    {"not_callable", R"j({{ 'abc'() }})j", R"j({})j", "'str' object is not callable"},
    {"mutating_method_unsafe", R"j({{ xs.append(1) }})j", R"j({"xs": [1]})j", "access to attribute 'append' of 'list' object is unsafe"},
    {"dict_update_unsafe", R"j({{ d.update({}) }})j", R"j({"d": {}})j", "access to attribute 'update' of 'dict' object is unsafe"},
    {"dunder_unsafe", R"j({{ ''.__class__() }})j", R"j({})j", "unsafe"},
    {"raise_exception_message", R"j(a
{{ raise_exception('Conversation roles must alternate') }})j", R"j({})j", "chat template line 2: the template raised an error: Conversation roles must alternate"},
    {"namespace_assign_non_namespace", R"j({% set x = 1 %}{% set x.a = 2 %})j", R"j({})j", "cannot assign attribute on non-namespace object"},
    {"unpack_mismatch", R"j({% for a, b in [(1, 2, 3)] %}{% endfor %})j", R"j({})j", "too many values to unpack"},
    {"macro_too_many_args", R"j({% macro m(a) %}{% endmacro %}{{ m(1, 2) }})j", R"j({})j", "macro 'm' takes not more than 1 argument(s)"},
    {"tojson_undefined", R"j({{ missing|tojson }})j", R"j({})j", "Object of type Undefined is not JSON serializable"},
    {"items_of_non_mapping", R"j({{ [1]|items|list }})j", R"j({})j", "Can only get item pairs from a mapping"},
    {"iterate_int", R"j({% for x in 5 %}{% endfor %})j", R"j({})j", "'int' object is not iterable"},
    {"in_none", R"j({{ 'a' in none }})j", R"j({})j", "argument of type 'NoneType' is not iterable"},
    {"range_too_big", R"j({{ range(200000)|length }})j", R"j({})j", "Range too big"},
    {"filter_bad_kwarg", R"j({{ 'a'|trim(nope=1) }})j", R"j({})j", "unexpected keyword argument 'nope'"},
    {"empty_separator", R"j({{ 'a'.split('') }})j", R"j({})j", "empty separator"},
    {"filter_indent_non_string", R"j({{ 5|indent }})j", R"j({})j", "unsupported operand type(s) for +=: 'int' and 'str'"},
    {"filter_int_of_undefined", R"j({{ missing|int }})j", R"j({})j", "'missing' is undefined"},
    {"unique_unhashable", R"j({{ [[1], [1]]|unique|list }})j", R"j({})j", "unhashable type: 'list'"},
    {"percent_not_all_converted", R"j({{ 'x' % 5 }})j", R"j({})j", "not all arguments converted"},
    {"break_in_macro_inside_loop", R"j({% for x in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %})j", R"j({})j", "'break' outside of a loop"},
};

const ErrorCase kUnsupportedCases[] = {
    {"block_unsupported", R"j({% block body %}{% endblock %})j", R"j({})j", "unsupported tag '{% block %}'"},
    {"recursive_loop_unsupported", R"j({% for x in [] recursive %}{% endfor %})j", R"j({})j", "unsupported: recursive for loops"},
    {"unsupported_filter_at_runtime", R"j({{ [1]|random }})j", R"j({})j", "unsupported filter 'random'"},
    {"str_format_unsupported", R"j({{ '{}'.format(1) }})j", R"j({})j", "unsupported: str.format()"},
    {"integer_overflow", R"j({{ 9223372036854775807 + 1 }})j", R"j({})j", "integer overflow"},
    {"int_filter_overflow", R"j({{ 1e20|int }})j", R"j({})j", "does not fit in 64 bits"},
};
// clang-format on

template <typename Case>
std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

class JinjaRenderTest : public testing::TestWithParam<RenderCase> {};

TEST_P(JinjaRenderTest, MatchesJinja2) {
  ScopedFixedDate date("2024-07-26");
  const RenderCase& test_case = GetParam();
  EXPECT_EQ(render(test_case.source, test_case.context), test_case.expected) << "template: " << test_case.source;
}

INSTANTIATE_TEST_SUITE_P(Jinja2Parity, JinjaRenderTest, testing::ValuesIn(kRenderCases), case_name<RenderCase>);

class JinjaErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(JinjaErrorTest, FailsWithMessage) {
  const ErrorCase& test_case = GetParam();
  std::string message = render_error(test_case.source, test_case.context);
  EXPECT_NE(message.find(test_case.message), std::string::npos) << "message: " << message;
  EXPECT_EQ(message.rfind("chat template", 0), 0u) << "message: " << message;
}

// Errors jinja2 raises too.
INSTANTIATE_TEST_SUITE_P(Jinja2Errors, JinjaErrorTest, testing::ValuesIn(kErrorCases), case_name<ErrorCase>);
// Features jinja2 has but this interpreter refuses loudly instead of rendering differently.
INSTANTIATE_TEST_SUITE_P(Unsupported, JinjaErrorTest, testing::ValuesIn(kUnsupportedCases), case_name<ErrorCase>);

TEST(JinjaTemplate, ParsesOnceRendersMany) {
  jinja::Template compiled("{% for m in messages %}{{ m.content }};{% endfor %}{{ extra | default('-') }}");
  EXPECT_EQ(compiled.render({{"messages", {{{"content", "a"}}, {{"content", "b"}}}}}), "a;b;-");
  EXPECT_EQ(compiled.render({{"messages", nlohmann::ordered_json::array()}, {"extra", "x"}}), "x");
}

TEST(JinjaTemplate, SyntaxErrorsSurfaceAtConstruction) {
  EXPECT_THROW(jinja::Template("{% if %}"), Error);
  EXPECT_THROW(jinja::Template("{% include 'x' %}"), Error);
}

TEST(JinjaTemplate, ContextKeyOrderFollowsTheJsonType) {
  // Python dicts keep insertion order; ordered_json does too, nlohmann::json sorts keys.
  const char* source = "{{ tool | tojson }}";
  nlohmann::ordered_json ordered = {{"tool", {{"name", "f"}, {"arguments", 1}}}};
  nlohmann::json sorted = {{"tool", {{"name", "f"}, {"arguments", 1}}}};
  EXPECT_EQ(jinja::render(source, ordered), R"({"name": "f", "arguments": 1})");
  EXPECT_EQ(jinja::render(source, sorted), R"({"arguments": 1, "name": "f"})");
}

TEST(JinjaTemplate, ContextMustBeAnObject) {
  EXPECT_THROW(jinja::render("x", nlohmann::ordered_json::array()), Error);
  EXPECT_EQ(jinja::render("x", nullptr), "x");
}

TEST(JinjaTemplate, InvalidUtf8PassesThroughUnchanged) {
  // Bytes that are not UTF-8 count as one character each, like Python's surrogateescape.
  nlohmann::ordered_json context = {{"s", std::string("a\xff\xfe" "b")}};
  EXPECT_EQ(jinja::render("{{ s }}|{{ s|length }}|{{ s[1:3] }}", context), "a\xff\xfe" "b|4|\xff\xfe");
}

TEST(JinjaTemplate, StrftimeNowUsesTheClockWithoutFixedDate) {
  ScopedFixedDate date(nullptr);
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string year = std::to_string(local.tm_year + 1900);
  EXPECT_EQ(jinja::render("{{ strftime_now('%Y') }}", nlohmann::ordered_json::object()), year);
}

TEST(JinjaTemplate, StrftimeNowRejectsMalformedFixedDate) {
  ScopedFixedDate date("26/07/2024");
  EXPECT_THROW(jinja::render("{{ strftime_now('%Y') }}", nlohmann::ordered_json::object()), Error);
}

TEST(JinjaTemplate, RunawayMacroRecursionIsAnError) {
  std::string message = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}");
  EXPECT_NE(message.find("maximum recursion depth exceeded in macro 'f'"), std::string::npos) << message;
}

TEST(JinjaTemplate, ErrorLineIsTheInnermostNode) {
  std::string message = render_error("{% for x in [1] %}\n\n{{ x.y.z }}\n{% endfor %}", "{}");
  EXPECT_EQ(message.rfind("chat template line 3: ", 0), 0u) << message;
}

}  // namespace
}  // namespace tq
