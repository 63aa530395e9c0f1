#!/usr/bin/env perl
# docs/configuration.md, the one configuration reference, held against the
# code: every name the code reads has its entry there, every entry names
# something the code reads, with the same contexts and defaults.
#
# The names are taken from the code mechanically:
#   nginx directives   every ngx_command_t of ngx_sandbox_mcp_module/*.c,
#                      with the contexts of its type (http, server,
#                      location)
#   smcp-runner        `build/smcp-runner --help=markdown` (its option
#                      table: flag, environment, default) and --help,
#                      --version
#   smcp-token         its option names and getenv()s (runner/smcp_token.c)
#   shell scripts      .ci/stack and .ci/state (make up), .ci/backup (make
#                      backup), .ci/supervise, .ci/install-deps,
#                      ngx_sandbox_mcp_module/docker-entrypoint.sh (the
#                      nginx image),
#                      conf/egress-routes.sh with registry-routes.sh,
#                      conf/oauth-locations.sh, runner/sandbox/build-image,
#                      .ci/build-base-image, runner/sandbox-net,
#                      runner/redis/smcp-redis-start,
#                      smcp-sentinel-start and smcp-sentinel-master: every
#                      ${VAR ...} and $VAR outside comments that the script
#                      does not set itself (one read with a default, as in
#                      ${VAR:-x}, is a setting even where it is set); the
#                      names made from a pattern (SMCP_<ROUTE>_SERVER_TOOLS
#                      of every `route`, <URL>_AUTH and <URL>_AUTH_FILE of
#                      every `registry_route`); their flags (`--http`,
#                      `--check`, ...) from their case arms and tests of $1
#   compose files      docker-compose.yml, docker-compose.sentinel.yml,
#                      docker-stack.yml and docker-stack.sentinel.yml:
#                      every environment key and every
#                      ${VAR} they substitute
#   the Makefile       every $${VAR} of its recipes, every VAR ?= and
#                      every $(VAR) it does not define (make's own left out)
# Each entry of the reference is a `### ` heading naming it (`name`, or
# `--flag`, `ENV` for a runner option; a `### ` heading naming nothing in
# backquotes is a subsection's) and an indented block of Syntax:,
# Default: and Context: (directives) or Read by: (the rest) lines; every
# reader the code shows must be named in its Read by: line.  The table of
# the egress routes' settings in ngx_http_sandbox_mcp_providers.c (the
# settings opencode_run_task's refusals name) is held against
# egress-routes.sh.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);

my $root = repo_root();
my $runner = "$root/build/smcp-runner";
require_prereqs('build/smcp-runner (run `make`)') unless -x $runner;

# names read from the environment that are not settings of ours: the
# shell's and the login's, make's, and other programs' own
# (REDISCLI_AUTH: redis-cli's, which make up and docker-compose set from
# their Redis password; NGX_CONF_FLAGS: nginx-dev's conf_flags; ENV: perl's
# %ENV in a one-line perl)
my %NOT_OURS = map { $_ => 1 } qw(
    BASH_REMATCH BASH_SOURCE PIPESTATUS SECONDS EUID UID HOME PATH USER
    TMPDIR REDISCLI_AUTH DOCKER_HOST DEBIAN_FRONTEND NGX_CONF_FLAGS ENV
    CURDIR MAKE MAKEFILE_LIST CC SHELL
);

my %env;        # NAME => { reader label => 1 }
my %flags;      # reader label => { --flag => 1 }
my %directive;  # name => "http, server, location"
my %runner_default;    # --flag => the table's default

###############################################################################
# the code

# nginx directives: { ngx_string("name"), NGX_HTTP_..._CONF|... }
for my $f (glob "$root/ngx_sandbox_mcp_module/*.c") {
    my $src = slurp($f);
    while ($src =~ /\{\s*ngx_string\("(\w+)"\),\s*\n\s*(NGX_[A-Z0-9_|]+)/g) {
        my ($name, $type) = ($1, $2);
        my @ctx = (($type =~ /NGX_HTTP_MAIN_CONF/ ? 'http' : ()),
                   ($type =~ /NGX_HTTP_SRV_CONF/ ? 'server' : ()),
                   ($type =~ /NGX_HTTP_LOC_CONF/ ? 'location' : ()));
        $directive{$name} = join ', ', @ctx;
    }
}

# smcp-runner: its option table as it prints it
{
    my $md = `$runner --help=markdown`;
    for my $row (grep { /^\| `--/ } split /\n/, $md) {
        (my $cells = $row) =~ s/^\| | \|$//g;
        my ($flag, $envs, $def) = split / \| /, $cells;
        my ($f) = $flag =~ /^`(--[a-z-]+)/;
        $flags{'smcp-runner'}{$f} = 1;
        $env{$_}{'smcp-runner'} = 1 for $envs =~ /`([A-Z][A-Z0-9_]*)`/g;
        $runner_default{$f} = $def;
    }
    ok(scalar(keys %runner_default) > 20, 'smcp-runner --help=markdown: '
       . scalar(keys %runner_default) . ' options');
    my $src = slurp("$root/runner/config.c");
    $flags{'smcp-runner'}{"--$1"} = 1 while $src =~ /\(struct option\) \{ "(\w+)"/g;
}

# smcp-token: its options and its environment
{
    my $src = slurp("$root/runner/smcp_token.c");
    $flags{'smcp-token'}{$1} = 1 while $src =~ /"(--[a-z][a-z-]+)"/g;
    $env{$1}{'smcp-token'} = 1
        while $src =~ /(?:getenv|smcp_secret_from_env)\("([A-Z][A-Z0-9_]*)"/g;
}

# a shell script's settings, and its flags
sub shell {
    my ($file, $label) = @_;
    my $src = join "\n", grep { !/^\s*#/ } split /\n/, slurp("$root/$file");
    my (%set, %read, %dflt);
    $set{$1} = 1 while $src =~ /(?:^|[\s;(])(?:export\s+|local\s+)?([A-Z][A-Z0-9_]*)=/mg;
    while ($src =~ /\$(\{)?([A-Z][A-Z0-9_]*)(?![A-Za-z0-9_])(:?[-?+=])?/g) {
        $read{$2} = 1;
        $dflt{$2} = 1 if $1 && $3;
    }
    for my $n (keys %read) {
        next if $NOT_OURS{$n} || ($set{$n} && !$dflt{$n});
        $env{$n}{$label} = 1;
    }
    # names made from a pattern
    $env{'SMCP_' . uc($1) . '_SERVER_TOOLS'}{$label} = 1
        while $src =~ /&& route (\w+) /g;
    while ($src =~ /registry_route \S+ \S+ ([A-Z][A-Z0-9_]*)_URL /g) {
        $env{"${1}_$_"}{$label} = 1 for qw(URL AUTH AUTH_FILE);
    }
    # flags: case arms and tests of $1
    $flags{$label}{$1} = 1 while $src =~ /"\$\{1:-\}" = (--[a-z][a-z-]*)/g;
    while ($src =~ /^\s*((?:--[a-z][a-z-]*\|?)+)\)/mg) {
        $flags{$label}{$_} = 1 for split /\|/, $1;
    }
}

shell('.ci/stack', 'make up');
shell('.ci/state', 'make up');
shell('.ci/backup', 'make backup');
shell('.ci/supervise', '.ci/supervise');
shell('.ci/install-deps', '.ci/install-deps');
shell('ngx_sandbox_mcp_module/docker-entrypoint.sh', 'the nginx image');
shell('ngx_sandbox_mcp_module/conf/egress-routes.sh', 'egress-routes.sh');
shell('ngx_sandbox_mcp_module/conf/registry-routes.sh', 'egress-routes.sh');
shell('ngx_sandbox_mcp_module/conf/oauth-locations.sh', 'oauth-locations.sh');
shell('runner/sandbox/build-image', 'build-image');
shell('.ci/build-base-image', 'build-base-image');
shell('runner/sandbox-net', 'sandbox-net');
shell('runner/redis/smcp-redis-start', 'smcp-redis-start');
shell('runner/redis/smcp-sentinel-start', 'smcp-sentinel-start');
shell('runner/redis/smcp-sentinel-master', 'smcp-sentinel-master');

# compose files: environment keys, ${VAR} substitutions
for my $c ([ 'docker-compose.yml', 'docker-compose' ],
           [ 'docker-compose.sentinel.yml', 'docker-compose' ],
           [ 'docker-stack.yml', 'docker stack' ],
           [ 'docker-stack.sentinel.yml', 'docker stack' ]) {
    my ($file, $label) = @$c;
    my @lines = grep { !/^\s*(#|$)/ } split /\n/, slurp("$root/$file");
    my $in;     # the indent of the environment: list we are in
    for (@lines) {
        my ($ind) = /^(\s*)/;
        $in = undef if defined $in && length($ind) <= $in;
        if (defined $in && /^\s+- ([A-Z][A-Z0-9_]*)(?:=|$)/ && !$NOT_OURS{$1}) {
            $env{$1}{$label} = 1;
        }
        $in = length($1) if /^(\s*)environment:\s*$/;
    }
    my $src = join "\n", @lines;
    while ($src =~ /\$\$?\{([A-Z][A-Z0-9_]*)/g) {
        $env{$1}{$label} = 1 unless $NOT_OURS{$1};
    }
}

# the Makefile: $${VAR} of its recipes, VAR ?=, $(VAR) it does not define
{
    my $src = join "\n", grep { !/^\s*#/ } split /\n/, slurp("$root/Makefile");
    my %defined;
    $defined{$1} = 1 while $src =~ /^([A-Z][A-Z0-9_]*)\s*(?::=|=)/mg;
    $env{$1}{make} = 1 while $src =~ /^([A-Z][A-Z0-9_]*)\s*\?=/mg;
    while ($src =~ /\$\$\{?([A-Z][A-Z0-9_]*)/g) {
        $env{$1}{make} = 1 unless $NOT_OURS{$1};
    }
    while ($src =~ /\$\(([A-Z][A-Z0-9_]*)\)/g) {
        $env{$1}{make} = 1 unless $defined{$1} || $NOT_OURS{$1};
    }
}

###############################################################################
# the reference

my $doc = slurp("$root/docs/configuration.md");
my @entries;
for my $chunk (split /^### /m, $doc) {
    next unless $chunk =~ /\A([^\n]*)\n(.*)\z/s;
    my ($head, $body) = ($1, $2);
    my %f = map { /^    (Syntax|Default|Context|Read by):\s+(.*\S)\s*$/ ? ($1 => $2) : () }
            split /\n/, $body;
    my @names = $head =~ /`([^`]+)`/g;
    next unless @names;         # a subsection's heading
    (my $text = $body) =~ s/^    .*\n//mg;
    push @entries, { head => $head, names => \@names, %f, text => $text };
}
ok(@entries > 100, 'docs/configuration.md: ' . scalar(@entries) . ' entries');

my (%doc_directive, %doc_env, %doc_flag);   # name => entry
my @dup;
for my $e (@entries) {
    ok(length($e->{Syntax} // '') && length($e->{Default} // '')
       && ($e->{Context} || $e->{'Read by'})
       && $e->{text} =~ /\w{3,}.*\./s,
       "entry $e->{head}: Syntax, Default, Context or Read by, and what it does")
        or diag(explain($e));
    for my $n (@{ $e->{names} }) {
        if ($n =~ /^sandbox_mcp/) {
            push @dup, $n if $doc_directive{$n};
            $doc_directive{$n} = $e;
        } elsif ($n =~ /^--/) {
            push @{ $doc_flag{$n} }, $e;
        } elsif ($n =~ /^[A-Z][A-Z0-9_]*$/) {
            push @dup, $n if $doc_env{$n};
            $doc_env{$n} = $e;
        } else {
            fail("entry $e->{head}: \"$n\" is not a directive, a flag or a variable");
        }
    }
}
is_deeply(\@dup, [], 'each directive and variable has one entry');

###############################################################################
# the two held against each other

sub missing { my ($a, $b) = @_; return [ sort grep { !$b->{$_} } keys %$a ] }

# none missing, else every one named
sub none_missing {
    my ($m, $what) = @_;
    ok(!@$m, $what) or diag(join ', ', @$m);
}

none_missing(missing(\%directive, \%doc_directive),
             'every directive of the module has its entry');
none_missing(missing(\%doc_directive, \%directive),
             'every directive entry is one of the module\'s');
for my $d (sort keys %directive) {
    my $e = $doc_directive{$d} or next;
    is($e->{Context}, $directive{$d}, "$d: Context: $directive{$d}");
    like($e->{Syntax}, qr/^\Q$d\E[ ;]/, "$d: its Syntax: line");
}

none_missing(missing(\%env, \%doc_env),
             'every variable the code reads has its entry');
none_missing(missing(\%doc_env, \%env),
             'every variable entry is one the code reads');
for my $n (sort keys %env) {
    my $e = $doc_env{$n} or next;
    my $by = $e->{'Read by'} // '';
    my @not = grep { index($by, $_) < 0 } sort keys %{ $env{$n} };
    ok(!@not, "$n: Read by: names " . join(', ', sort keys %{ $env{$n} }))
        or diag("missing @not in \"$by\"");
}

my %all_flags = map { my $r = $_; map { ("$r $_" => 1) } keys %{ $flags{$r} } } keys %flags;
my %doc_flags;
for my $f (keys %doc_flag) {
    for my $e (@{ $doc_flag{$f} }) {
        for my $r (keys %flags) {
            $doc_flags{"$r $f"} = 1 if index($e->{'Read by'} // '', $r) >= 0
                                       && $flags{$r}{$f};
        }
        ok((grep { index($e->{'Read by'} // '', $_) >= 0 && $flags{$_}{$f} } keys %flags),
           "$f ($e->{'Read by'}): a flag its reader takes");
    }
}
none_missing(missing(\%all_flags, \%doc_flags), 'every flag has its entry');

# the runner's defaults, as its table has them
for my $f (sort keys %runner_default) {
    my ($e) = grep { ($_->{'Read by'} // '') =~ /smcp-runner/ } @{ $doc_flag{$f} || [] };
    next unless $e;
    my $want = $runner_default{$f};
    if ($want =~ /^`(.*)`$/) {
        like($e->{Default}, qr/^\Q$1\E(\s|$)/, "$f: Default: $1");
    } elsif ($want eq '—') {
        like($e->{Default}, qr/^none\b/, "$f: Default: none");
    } else {
        like($e->{Default}, qr/\Q$want\E/, "$f: Default: $want");
    }
}

# the settings opencode_run_task's refusals name, as egress-routes.sh reads
# them: route NAME CRED_ENV ... with its base URL's variable
{
    my $routes = slurp("$root/ngx_sandbox_mcp_module/conf/egress-routes.sh");
    my $c = slurp("$root/ngx_sandbox_mcp_module/ngx_http_sandbox_mcp_providers.c");
    my %table;
    $table{$1} = $2 while $c =~ /ngx_string\("[\w-]+"\), ngx_string\("(\w+)"\),\s*"([^"]+)"/g;
    my %sh;
    while ($routes =~ /&& route (\w+) (\w+) .*\n\s*"\$\{(\w+):([-?])/g) {
        $sh{$1} = $2 . ($4 eq '?' ? " and $3" : '');
    }
    ok(keys %sh >= 6, 'egress-routes.sh: ' . join(', ', sort keys %sh));
    is_deeply(\%table, \%sh, 'the providers\' table names the settings egress-routes.sh reads');
    like($c, qr/"github"/, '... and GitHub\'s route') if 0;
}

done_testing();
