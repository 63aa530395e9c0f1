#!/usr/bin/perl

# The tools' definitions are data (ngx_sandbox_mcp_module/tools/NAME.json,
# with include/ for shared parts), embedded and checked at build by
# smcp-embed (ngx_sandbox_mcp_module/common/embed/), as are the Redis
# scripts (common/scripts/NAME.lua), the dashboard's files (ui/) and the
# OAuth pages (oauth/), whose pages are laid out on their layouts/:
#
#   - a definition that does not parse, or lacks what a tool needs, and a
#     script without its KEYS/ARGV header, a Perl program the runner
#     starts (runner/egress-relay) without its #! line or use strict, a
#     dashboard file of an unknown type or one that cannot be read, and a
#     page whose layout or slot is missing stop smcp-embed, which names
#     the file; so do a script's include line ("--@include NAME") that
#     is malformed, names no library of common/scripts/lib/ or is in a
#     library, with the line; the module's objects depend on the generated
#     headers (so `make` and the `config` build stop too);
#   - a script is embedded with its includes expanded, as lua_script()
#     gives it to the contract tests (t/mcp_scripts.t, t/runner_scripts.t);
#   - tools/list serves exactly the files (includes expanded), in order;
#   - tools/call checks arguments against the same schema: an argument that
#     is not among its properties is refused naming every property; every
#     bound the schema states (required, maxLength, enum, minimum, maximum,
#     default) is the bound the module applies.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use JSON::PP ();
use Test::More;
use SMCP::Test qw(json_decode lua_script repo_root slurp spew);

my $root = repo_root();
my $mod = "$root/ngx_sandbox_mcp_module";
my $tools_dir = "$mod/tools";
my @ORDER = qw(opencode_run_task opencode_get_result opencode_list_runs
               opencode_cancel_run opencode_pick_attempt opencode_send_message
               opencode_get_diff opencode_get_events opencode_list_sessions);

my $t = SMCP::Test->new(workers => 1);
my $dir = tempdir('smcp-schemas-XXXXXX', TMPDIR => 1,
                  CLEANUP => !$ENV{SMCP_TEST_KEEP});

# a definition with its {"$include": FILE} objects replaced
sub expand {
    my ($v) = @_;
    if (ref $v eq 'HASH') {
        if (exists $v->{'$include'}) {
            return expand(json_decode(slurp("$tools_dir/include/$v->{'$include'}")));
        }
        return { map { $_ => expand($v->{$_}) } keys %$v };
    }
    return [ map { expand($_) } @$v ] if ref $v eq 'ARRAY';
    return $v;
}

my %DEF = map { $_ => expand(json_decode(slurp("$tools_dir/$_.json"))) } @ORDER;

###############################################################################
# build time: smcp-embed

my $embed = "$dir/smcp-embed";
my $cc = `cc -O1 -Wall -Wextra -Werror -o $embed $mod/common/embed/smcp_embed.c -ljansson 2>&1`;
is($? >> 8, 0, 'smcp-embed builds warning-free') or diag($cc);

sub embed {
    my ($kind, $in, @pre) = @_;
    my $out = `@pre $embed $kind $dir/out.h $in 2>&1`;
    return ($? >> 8, $out);
}

subtest 'the real files embed' => sub {
    my ($rc, $out) = embed('tools', $tools_dir);
    is($rc, 0, 'tools/ embeds') or diag($out);
    my $h = slurp("$dir/out.h");
    like($h, qr/static const char smcp_tool_$_\[\]/, "smcp_tool_$_") for @ORDER;
    ($rc, $out) = embed('lua', "$mod/common/scripts");
    is($rc, 0, 'common/scripts/ embeds') or diag($out);
    $h = slurp("$dir/out.h");
    my @lua = map { m{([^/]+)\.lua$} } glob("$mod/common/scripts/*.lua");
    like($h, qr/static const char smcp_lua_$_\[\]/, "smcp_lua_$_") for @lua;
    like($h, qr/#define SMCP_LUA_SCRIPTS\(X\)/, 'the list of names');

    # the text embedded is the text the contract tests run
    spew("$dir/lua-text.c", "#include <stdio.h>\n#include \"out.h\"\nint main(void){"
         . join('', map { "fputs(smcp_lua_$_,stdout);putchar(0);" } @lua)
         . "return 0;}\n");
    my $cc2 = `cc -o $dir/lua-text $dir/lua-text.c 2>&1`;
    is($? >> 8, 0, 'the header compiles') or diag($cc2);
    my @text = split /\0/, `$dir/lua-text`;
    is($text[$_], lua_script("$mod/common/scripts", $lua[$_]),
       "smcp_lua_$lua[$_]: the text lua_script() gives") for 0 .. $#lua;
    ok(!grep(/^[ \t]*--\@/m, @text), 'no include line left');
    # a client that is not authenticated (the module's SCRIPT LOADs after a
    # refused AUTH: t/mcp_security.t) may send no longer string: Redis
    # drops it with a protocol error, not NOAUTH
    cmp_ok(length($text[$_]), '<=', 16384, "smcp_lua_$lua[$_]: at most 16 KiB")
        for 0 .. $#lua;
    ok(scalar(grep { /^local function ungranted\(/m } @text) >= 3,
       'lib/grants.lua in the scripts that include it');
};

# a copy of tools/ with one file changed by $edit; smcp-embed must refuse
# it, naming the file and saying what is wrong
sub broken_tool {
    my ($name, $file, $edit, $re) = @_;
    my $d = "$dir/t" . int(rand(1e9));
    make_path("$d/include");
    copy($_, "$d/") for glob("$tools_dir/*.json");
    copy($_, "$d/include/") for glob("$tools_dir/include/*.json");
    my $text = slurp("$d/$file");
    local $_ = $text;
    $edit->();
    spew("$d/$file", $_);
    my ($rc, $out) = embed('tools', $d);
    isnt($rc, 0, "$name: smcp-embed fails");
    like($out, qr{\Q$d/$file\E: .*$re}, "$name: names $file: $re") or diag($out);
    ok(!-e "$dir/out.h.tmp", "$name: no partial output left");
}

unlink "$dir/out.h";
broken_tool('syntax error', 'opencode_list_runs.json',
            sub { s/"title": "List runs",/"title": "List runs"/ },
            qr/line \d+, column \d+/);
broken_tool('duplicate key', 'opencode_cancel_run.json',
            sub { s/("title": "Cancel a run",)/$1 "title": "again",/ },
            qr/duplicate/);
broken_tool('name not the file', 'opencode_get_diff.json',
            sub { s/"name": "opencode_get_diff"/"name": "get_diff"/ },
            qr/"name" must be "opencode_get_diff"/);
broken_tool('unknown arguments accepted', 'opencode_get_events.json',
            sub { s/"additionalProperties": false/"additionalProperties": true/ },
            qr/additionalProperties/);
broken_tool('required names no property', 'opencode_get_result.json',
            sub { s/"required": \["runId"\]/"required": ["runID"]/ },
            qr/"required" names "runID"/);
broken_tool('property without a type', 'opencode_run_task.json',
            sub { s/"title": \{"type": "string", "maxLength": 200\}/"title": {"maxLength": 200}/ },
            qr/property "title" needs a type/);
broken_tool('annotation not a boolean', 'opencode_list_runs.json',
            sub { s/"readOnlyHint": true/"readOnlyHint": "yes"/ },
            qr/annotation "readOnlyHint"/);
broken_tool('taskSupport not a known value', 'opencode_run_task.json',
            sub { s/"taskSupport": "optional"/"taskSupport": "sometimes"/ },
            qr/"execution" must be/);
broken_tool('a broken include', 'include/time.json',
            sub { s/\}\s*$/,}/ }, qr/line \d+/);
broken_tool('an include of nothing', 'opencode_get_result.json',
            sub { s/"\$include": "run.json"/"\$include": "nope.json"/ },
            qr/include\/nope.json|nope.json/);

subtest 'a script without its KEYS/ARGV header' => sub {
    my $d = "$dir/lua";
    make_path("$d/lib");
    copy($_, "$d/") for glob("$mod/common/scripts/*.lua");
    copy($_, "$d/lib/") for glob("$mod/common/scripts/lib/*.lua");
    spew("$d/no_header.lua", "-- A script.\nreturn 1\n");
    my ($rc, $out) = embed('lua', $d);
    isnt($rc, 0, 'smcp-embed fails');
    like($out, qr{\Q$d/no_header.lua\E: .*KEYS}, 'names the file and the header')
        or diag($out);
    unlink "$d/no_header.lua";
    spew("$d/Bad-Name.lua", "-- KEYS: none\n-- ARGV: none\nreturn 1\n");
    ($rc, $out) = embed('lua', $d);
    isnt($rc, 0, 'a name that is no C identifier: fails');
    like($out, qr{Bad-Name\.lua: the name}, '... named') or diag($out);
};

subtest 'a script\'s includes: lib/NAME.lua, checked' => sub {
    my $d = "$dir/lua-include";
    make_path("$d/lib");
    my $head = "-- KEYS: none\n-- ARGV: none\n";
    # its opening comment stays in the library: its code is embedded
    spew("$d/lib/one.lua", "-- one(): 1\n\n  -- (so)\nlocal function one()\n"
                           . "  -- kept\n  return 1 end");
    spew("$d/a.lua", "$head--\@include one\nreturn one()\n");
    my ($rc, $out) = embed('lua', $d);
    is($rc, 0, 'a script with an include embeds') or diag($out);
    like(slurp("$dir/out.h"), qr{\Q"-- ARGV: none\n"
    "local function one()\n"
    "  -- kept\n"
    "  return 1 end\n"
    "return one()\n";\E}, '... the library\'s code in the include line\'s place');
    is(lua_script($d, 'a'), "${head}local function one()\n  -- kept\n  return 1 end\n"
       . "return one()\n", '... as lua_script() gives it');
    # a long comment is code as far as this goes
    spew("$d/lib/one.lua", "-- one(): 1\n--[[ x\n]]\nlocal function one() return 1 end\n");
    ($rc, $out) = embed('lua', $d);
    is($rc, 0, 'a library with a long comment embeds') or diag($out);
    like(slurp("$dir/out.h"), qr{\Q"-- ARGV: none\n"
    "--[[ x\n"\E}, '... from its first line');
    is(lua_script($d, 'a'), "${head}--[[ x\n]]\nlocal function one() return 1 end\n"
       . "return one()\n", '... as lua_script() gives it');

    for my $case ([ 'an unknown include', '--@include two',
                    qr{line 3: unknown include "two": \Q$d\E/lib/two\.lua: No such file} ],
                  [ 'a name that is no file name', '--@include ../a',
                    qr/line 3: .*exactly "--\@include NAME"/ ],
                  [ 'no name', '--@include', qr/line 3: .*--\@include NAME/ ],
                  [ 'more after the name', '--@include one two',
                    qr/line 3: .*--\@include NAME/ ],
                  [ 'a blank after the name', '--@include one ',
                    qr/line 3: .*--\@include NAME/ ],
                  [ 'not at the start of its line', '  --@include one',
                    qr/line 3: .*--\@include NAME/ ],
                  [ 'another word', '--@require one', qr/line 3: .*--\@include NAME/ ]) {
        spew("$d/a.lua", "$head$case->[1]\nreturn 1\n");
        ($rc, $out) = embed('lua', $d);
        isnt($rc, 0, "$case->[0]: smcp-embed fails");
        like($out, qr{\Q$d/a.lua\E: $case->[2]}, '... naming the file and line')
            or diag($out);
        ok(!-e "$dir/out.h.tmp", '... no partial output left');
        ok(!eval { lua_script($d, 'a'); 1 }, '... lua_script() refuses it too');
    }

    spew("$d/lib/two.lua", "local x = 2\n");
    spew("$d/lib/one.lua", "local y = 1\n--\@include two\n");
    spew("$d/a.lua", "$head--\@include one\nreturn 1\n");
    ($rc, $out) = embed('lua', $d);
    isnt($rc, 0, 'an include in a library: smcp-embed fails');
    like($out, qr{\Q$d/lib/one.lua\E: line 2: an include in a library \(included by \Q$d/a.lua\E\)},
         '... naming the library, the line and the script') or diag($out);
    ok(!eval { lua_script($d, 'a'); 1 }, '... lua_script() refuses it too');
};

subtest 'the programs the runner starts: perl' => sub {
    my ($rc, $out) = embed('perl', "$root/runner/egress-relay");
    is($rc, 0, 'runner/egress-relay embeds') or diag($out);
    like(slurp("$dir/out.h"), qr/static const char smcp_perl_egress_relay\[\]/,
         'smcp_perl_egress_relay');
    my $d = "$dir/perl";
    make_path($d);
    for my $case ([ 'no #! line', 'a-b', "use strict;\nprint 1;\n", qr/#! line naming perl/ ],
                  [ 'another interpreter', 'a-b', "#!/bin/sh\nuse strict;\n", qr/#! line/ ],
                  [ 'no use strict', 'a-b', "#!/usr/bin/perl\nprint 1;\n", qr/use strict/ ],
                  [ 'a name that is no C identifier', 'a.b', "#!/usr/bin/perl\nuse strict;\n",
                    qr/the name/ ]) {
        spew("$d/$case->[1]", $case->[2]);
        ($rc, $out) = embed('perl', "$d/$case->[1]");
        isnt($rc, 0, "$case->[0]: smcp-embed fails");
        like($out, qr{\Q$d/$case->[1]\E: .*$case->[3]}, '... naming the file') or diag($out);
        ok(!-e "$dir/out.h.tmp", '... no partial output left');
        unlink "$d/$case->[1]";
    }
};

subtest 'the OAuth pages: html and css' => sub {
    my ($rc, $out) = embed('html', "$mod/oauth");
    is($rc, 0, 'oauth/*.html embed') or diag($out);
    like(slurp("$dir/out.h"), qr/static const char smcp_html_signin\[\]/, 'smcp_html_signin');
    ($rc, $out) = embed('css', "$mod/oauth");
    is($rc, 0, 'oauth/*.css embed') or diag($out);
    like(slurp("$dir/out.h"), qr/static const char smcp_css_signin\[\]/, 'smcp_css_signin');

    my $d = "$dir/oauth";
    make_path($d);
    for my $case ([ 'no doctype', 'x.html', "<html>{{a}}</html>\n", qr/doctype/ ],
                  [ 'a bad placeholder', 'x.html', "<!doctype html>{{A b}}\n", qr/placeholder/ ],
                  [ 'an open placeholder', 'x.html', "<!doctype html>{{abc\n", qr/placeholder/ ],
                  [ 'markup in a style sheet', 'x.css', "a { } </style><script>\n", qr/</ ]) {
        unlink glob("$d/*");
        spew("$d/$case->[1]", $case->[2]);
        ($rc, $out) = embed($case->[1] =~ /css$/ ? 'css' : 'html', $d);
        isnt($rc, 0, "$case->[0]: smcp-embed fails");
        like($out, qr{\Q$d/$case->[1]\E: .*$case->[3]}, '... naming the file') or diag($out);
    }
};

subtest 'the dashboard files: embedded byte for byte, typed; others refused' => sub {
    my $ui = "$mod/ui";
    my ($rc, $out) = embed('ui', $ui);
    is($rc, 0, 'ui/ embeds') or diag($out);
    my $h = slurp("$dir/out.h");
    my @files = ((map { s{^\Q$ui\E/}{}r } grep { -f } glob("$ui/*")),
                 (map { s{^\Q$ui\E/}{}r } glob("$ui/static/*")));
    ok(@files >= 7, 'pages and assets: ' . scalar @files);
    like($h, qr/\{ "\Q$_\E", "[^"]+", "\\"[0-9a-f]{16}\\"",/, "$_: an entry with its type and ETag")
        for @files;
    like($h, qr/#define SMCP_UI_NFILES  ${\ scalar @files}\b/, 'the count');

    # binary bytes (a PNG holds NULs) compile to the same bytes
    my $d = "$dir/ui";
    make_path("$d/static", "$d/layouts");
    copy($_, "$d/") for grep { -f } glob("$ui/*");
    copy($_, "$d/static/") for glob("$ui/static/*");
    copy($_, "$d/layouts/") for glob("$ui/layouts/*");
    my $png = join '', map { chr } 137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 0, 255, 63, 92, 34;
    spew("$d/static/dot.png", $png);
    ($rc, $out) = embed('ui', $d);
    is($rc, 0, 'a binary file embeds') or diag($out);
    spew("$dir/check.c", qq{#include <stdio.h>\n#include "out.h"\nint main(void){size_t i;for(i=0;i<SMCP_UI_NFILES;i++)if(!strcmp(smcp_ui_files[i].path,"static/dot.png")){fwrite(smcp_ui_files[i].data,1,smcp_ui_files[i].len,stdout);printf("|%s",smcp_ui_files[i].type);}return 0;}\n});
    my $cc2 = `cc -include string.h -o $dir/check $dir/check.c 2>&1`;
    is($? >> 8, 0, 'the header compiles') or diag($cc2);
    is(`$dir/check`, "$png|image/png", '... and holds the very bytes, typed image/png');

    spew("$d/static/evil.exe", "MZ");
    ($rc, $out) = embed('ui', $d);
    isnt($rc, 0, 'an unknown extension: smcp-embed fails');
    like($out, qr{evil\.exe: unknown extension}, '... naming the file') or diag($out);
    ok(!-e "$dir/out.h.tmp", '... no partial output left');
    unlink "$d/static/evil.exe";

    spew("$d/static/Bad Name.js", "x");
    ($rc, $out) = embed('ui', $d);
    isnt($rc, 0, 'a name with a space: fails');
    unlink "$d/static/Bad Name.js";

    spew("$d/static/secret.js", "x");
    chmod 0, "$d/static/secret.js";
    # root reads any file: as root, without the capabilities that let it
    my @user = $> == 0 ? ('setpriv', '--bounding-set=-dac_override,-dac_read_search') : ();
    ($rc, $out) = embed('ui', $d, @user);
    isnt($rc, 0, 'a file that cannot be read: fails');
    like($out, qr{secret\.js: Permission denied}, '... naming it') or diag($out);
    unlink "$d/static/secret.js";

    make_path("$d/sub");
    ($rc, $out) = embed('ui', $d);
    isnt($rc, 0, 'a directory other than static/: fails');
    like($out, qr{sub: not a regular file}, '... naming it') or diag($out);
};

subtest 'the pages laid out: one head per family, every slot filled' => sub {
    for my $family ('ui', 'oauth') {
        my $src = "$mod/$family";
        my $d = "$dir/layout-$family";
        make_path("$d/layouts", "$d/static");
        copy($_, "$d/layouts/") for glob("$src/layouts/*.html");
        spew("$d/static/app.css", "a { }\n");
        my $kind = $family eq 'ui' ? 'ui' : 'html';
        my $page = sub { "{{<page}}\n{{\$title}}T{{/title}}\n$_[0]"
                         . "{{\$main}}\n<h1>x</h1>\n{{/main}}\n" };
        my $slots = $family eq 'ui'
                  ? "{{\$scripts}}{{/scripts}}\n{{\$skip}}{{/skip}}\n{{\$nav}}{{/nav}}\n" : '';

        spew("$d/x.html", $page->($slots));
        my ($rc, $out) = embed($kind, $d);
        is($rc, 0, "$family: a page on the layout embeds") or diag($out);
        my $h = `$embed page $d/x.html`;
        like($h, qr/^<!doctype html>\n/, "$family: laid out from the doctype");
        like($h, qr{<title>[^<]*T[^<]*</title>}, "$family: the title filled");
        unlike($h, qr/\{\{[\$<\/]/, "$family: no tag left");

        for my $case (
            [ 'a layout that is not there', "{{<nope}}\n" . $page->($slots) =~ s/^.*\n//r,
              qr{its layout \Q$d\E/layouts/nope\.html: No such file} ],
            [ 'a slot not filled', "{{<page}}\n{{\$main}}{{/main}}\n",
              qr/fills no slot \{\{\$title\}\}/ ],
            [ 'a block without its slot', $page->("$slots\{{\$foot}}x{{/foot}}\n"),
              qr/has no slot \{\{\$foot\}\}/ ],
            [ 'a block not closed', "{{<page}}\n{{\$title}}T{{/main}}\n",
              qr/\{\{\$title\}\} is not closed/ ],
            [ 'text out of a block', "{{<page}}\nhello\n",
              qr/holds blocks .* only/ ],
            [ 'an inline script', $page->($slots) =~ s{<h1>x</h1>}{<script>alert(1)</script><h1>x</h1>}r,
              qr/inline script/ ]) {
            spew("$d/x.html", $case->[1]);
            ($rc, $out) = embed($kind, $d);
            isnt($rc, 0, "$family: $case->[0]: smcp-embed fails");
            like($out, qr{\Q$d/x.html\E: .*$case->[2]}, '... naming the page')
                or diag($out);
            ok(!-e "$dir/out.h.tmp", '... no partial output left');
        }
    }
};

subtest 'the module is rebuilt from the generated headers' => sub {
    my $mk = "$root/build/nginx-obj/Makefile";
    plan skip_all => "$mk not there (run `make`)" unless -f $mk;
    my $m = slurp($mk);
    for my $h (qw(ngx_http_sandbox_mcp_lua.h ngx_http_sandbox_mcp_tools_json.h
                  ngx_http_sandbox_mcp_ui_files.h
                  ngx_http_sandbox_mcp_oauth_html.h ngx_http_sandbox_mcp_oauth_css.h)) {
        like($m, qr{^\S*/\Q$h\E:.*smcp-embed}m, "a rule makes $h");
        like($m, qr{^ADDON_DEPS = .*\Q$h\E}m, "... and the module's objects depend on it");
    }
};

###############################################################################
# run time: tools/list and tools/call

$t->start;
my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session');

subtest 'tools/list serves the files' => sub {
    my $r = $t->rpc($sid, 'tools/list', {});
    my $tools = $r->{json}{result}{tools} || [];
    is_deeply([ map { $_->{name} } @$tools ], \@ORDER, 'every tool, in order');
    # run_task's `agent` lists the location's agents (sandbox_mcp_agents;
    # none given: opencode alone)
    my %want = %DEF;
    my $rt = JSON::PP::decode_json(JSON::PP::encode_json($DEF{opencode_run_task}));
    $rt->{inputSchema}{properties}{agent}{enum} = [ 'opencode' ];
    $want{opencode_run_task} = $rt;
    is_deeply($tools->[$_], $want{ $ORDER[$_] },
              "$ORDER[$_]: exactly its file" . ($_ ? '' : " (agent: this location's)"))
        for 0 .. $#ORDER;
};

sub call { return scalar $t->call_tool($sid, @_) }

sub refused {
    my ($res, $re, $name) = @_;
    ok(SMCP::Test::is_error_result($res), "$name: isError");
    like(SMCP::Test::result_text($res), $re, "$name: the message") or
        diag(SMCP::Test::result_text($res));
}

# arguments that satisfy each tool's required ones
my %BASE = (
    opencode_run_task   => { task => 'x' },
    opencode_get_result => { runId => 'run_' . ('0' x 24) },
    opencode_list_runs  => {},
    opencode_cancel_run => { runId => 'run_' . ('0' x 24) },
    opencode_get_diff   => { runId => 'run_' . ('0' x 24) },
    opencode_get_events => { runId => 'run_' . ('0' x 24) },
    opencode_list_sessions => {},
    opencode_send_message => { runId => 'run_' . ('0' x 24), message => 'x' },
    opencode_pick_attempt => { groupId => 'run_' . ('0' x 24), runId => 'run_' . ('1' x 24) },
);

my $before = $t->redis('DBSIZE');

for my $name (@ORDER) {
    my $in = $DEF{$name}{inputSchema};
    my $props = $in->{properties};
    subtest "$name: arguments by its schema" => sub {
        my $res = call($name, { %{ $BASE{$name} }, bogus => 1 });
        refused($res, qr/Unknown argument 'bogus' for \Q$name\E; accepted: /,
                'an unknown argument');
        my ($list) = SMCP::Test::result_text($res) =~ /accepted: (.*)\.$/;
        is_deeply([ sort split /, /, $list // '' ], [ sort keys %$props ],
                  '... listing exactly its properties');

        for my $req (@{ $in->{required} || [] }) {
            my %a = %{ $BASE{$name} };
            delete $a{$req};
            refused(call($name, \%a), qr/Missing required argument '\Q$req\E'/,
                    "required $req missing");
        }

        for my $p (sort keys %$props) {
            my $s = $props->{$p};
            if (defined $s->{maxLength}) {
                refused(call($name, { %{ $BASE{$name} },
                                      $p => 'x' x ($s->{maxLength} + 1) }),
                        qr/'\Q$p\E' is too long .* at most $s->{maxLength}\b/,
                        "$p: maxLength $s->{maxLength}");
            }
            if ($s->{enum}) {
                my $all = join(', ', @{ $s->{enum} });
                refused(call($name, { %{ $BASE{$name} }, $p => 'nope' }),
                        qr/'\Q$p\E' must be one of \Q$all\E\./, "$p: enum");
            }
            next unless ($s->{type} // '') eq 'integer';
            my $max = $s->{maximum};
            my $min = $s->{minimum};
            if (defined $min) {
                refused(call($name, { %{ $BASE{$name} }, $p => $min - 1 }),
                        qr/'\Q$p\E' must be between $min and /, "$p: minimum $min");
            }
            if (defined $max) {
                refused(call($name, { %{ $BASE{$name} }, $p => $max + 1 }),
                        qr/'\Q$p\E' must be between \S+ and $max \(got/,
                        "$p: maximum $max");
            }
        }
    };
}

is($t->redis('DBSIZE'), $before, 'no refused call wrote anything');

subtest 'defaults come from the schema' => sub {
    my $limit = $DEF{opencode_list_runs}{inputSchema}{properties}{limit};
    is($limit->{default}, 10, 'opencode_list_runs: limit defaults to 10 (the schema)');
    my $n = $limit->{default} + 2;
    for my $i (1 .. $n) {
        my $sc = SMCP::Test::sc(call('opencode_run_task', { task => "run $i" }));
        ok($sc && $sc->{runId}, "run $i started") or last;
        # a tenant's queue is capped (sandbox_mcp_max_queued, 20 by default)
    }
    my $sc = SMCP::Test::sc(call('opencode_list_runs', {}));
    is(scalar @{ $sc->{runs} || [] }, $limit->{default},
       'without limit: a page of the default size');
    ok($sc->{nextCursor}, '... and a cursor for the rest');
};

done_testing();
