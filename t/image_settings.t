#!/usr/bin/env perl
# The settings the nginx containers share with the runner reach both, as
# they do in make up (t/stack_settings.t): the nginx image's entrypoint
# renders SMCP_REDIS_PREFIX (both roles), SMCP_LOG_FORMAT and a tenant's
# budgets (SMCP_TENANT_REDIS_BYTES, _SESSIONS, _DISK: nginx's refusals at
# run_task; the runner holds running runs to the same values), and
# docker-compose passes each to the nginx, egress and runner containers
# that read it.  The entrypoint runs here, not in a container (its exec
# stubbed: nothing starts), into a temp directory; nginx -t takes what it
# renders.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);

my $t = SMCP::Test->new;
my $root = repo_root();

# render(role, env): (exit code, nginx.conf, stderr, the directory)
sub render {
    my ($role, %env) = @_;
    my $dir = "$t->{dir}/$role-" . rhex(4);
    mkdir $dir;
    my $sh = 'exec() { :; }; source "$1"; dir="$2"; render && cat "$dir/nginx.conf"';
    local %ENV = (%ENV, SMCP_RENDER_CONF => 'no', PROXY_JWT_SECRET_FILE => $t->{secret_file},
                  SMCP_ROLE => $role, SMCP_MCP_ADDR => '*', SMCP_METRICS_PORT => 'off',
                  SMCP_REDIS => '127.0.0.1:1',
                  SMCP_CONF_SCRIPTS => "$root/ngx_sandbox_mcp_module/conf", %env);
    my ($rc, $out, $err) = run_cmd([ 'bash', '-c', $sh, 'render',
                                     "$root/ngx_sandbox_mcp_module/docker-entrypoint.sh", $dir ]);
    return ($rc, $out, $err, $dir);
}

# nginx -t of a rendered configuration (paths made local)
sub conf_ok {
    my ($conf, $dir, $what) = @_;
    my $load = $t->{static} ? '' : 'load_module ' . module_path() . ';';
    $conf =~ s{load_module modules/\S+;}{$load};
    $conf =~ s{user www-data;}{$> == 0 ? 'user root;' : ''}e;
    $conf =~ s{pid /run/nginx.pid;}{pid $dir/nginx.pid;};
    spew("$dir/test.conf", $conf);
    my ($rc, $out, $err) = SMCP::Test::nginx_config_test($t->{nginx_bin}, '-p', "$dir/",
        '-c', "$dir/test.conf", '-e', "$dir/error.log");
    is($rc, 0, "$what: nginx -t accepts it") or diag("$out$err");
}

my %shared = (SMCP_REDIS_PREFIX => 'cfgimg:', SMCP_LOG_FORMAT => 'json',
              SMCP_TENANT_REDIS_BYTES => '64m', SMCP_TENANT_SESSIONS => '3',
              SMCP_TENANT_DISK => '1g');

{
    my ($rc, $conf, $err, $dir) = render('mcp', %shared);
    is($rc, 0, 'role mcp renders') or diag($err);
    like($conf, qr/^\s*sandbox_mcp_redis_prefix cfgimg:;$/m, 'mcp: SMCP_REDIS_PREFIX');
    like($conf, qr/^\s*sandbox_mcp_log_format json;$/m, 'mcp: SMCP_LOG_FORMAT');
    my ($loc) = $conf =~ /location = \/mcp \{(.*?)\}/s;
    like($loc // '', qr/sandbox_mcp_tenant_redis_bytes 64m;/, 'mcp: SMCP_TENANT_REDIS_BYTES on /mcp');
    like($loc // '', qr/sandbox_mcp_tenant_sessions 3;/, '... SMCP_TENANT_SESSIONS');
    like($loc // '', qr/sandbox_mcp_tenant_disk 1g;/, '... SMCP_TENANT_DISK');
    conf_ok($conf, $dir, 'role mcp');

    ($rc, $conf) = render('mcp');
    unlike($conf, qr/sandbox_mcp_tenant_|sandbox_mcp_redis_prefix/, 'unset: the module\'s defaults');

    ($rc, undef, $err) = render('mcp', SMCP_TENANT_DISK => 'lots');
    isnt($rc, 0, 'SMCP_TENANT_DISK=lots: refused');
    like($err, qr/SMCP_TENANT_DISK=lots: want a size/, '... saying so');

    # the agents runs may name (issue 26, point 3)
    ($rc, $conf, $err, $dir) = render('mcp', SMCP_AGENTS => 'opencode codex=openai/gpt-5.5');
    is($rc, 0, 'SMCP_AGENTS renders') or diag($err);
    ($loc) = $conf =~ /location = \/mcp \{(.*?)\}/s;
    like($loc // '', qr/sandbox_mcp_agents opencode codex=openai\/gpt-5\.5;/,
         'mcp: SMCP_AGENTS on /mcp');
    conf_ok($conf, $dir, 'SMCP_AGENTS');
    ($rc, undef, $err) = render('mcp', SMCP_AGENTS => 'opencode; evil');
    isnt($rc, 0, 'SMCP_AGENTS with a semicolon: refused');
    like($err, qr/SMCP_AGENTS=opencode; evil: want agents/, '... saying so');
}

{
    my ($rc, $conf, $err, $dir) = render('egress', %shared, ANTHROPIC_API_KEY => 'sk-ant-img');
    is($rc, 0, 'role egress renders') or diag($err);
    like($conf, qr/^\s*sandbox_mcp_redis_prefix cfgimg:;$/m, 'egress: SMCP_REDIS_PREFIX');
    like($conf, qr/^\s*sandbox_mcp_log_format json;$/m, 'egress: SMCP_LOG_FORMAT');
    like(slurp("$dir/egress-http.conf"), qr/^sandbox_mcp_egress_announce on;$/m,
         'egress: it announces its routes');
    local $ENV{ANTHROPIC_API_KEY} = 'sk-ant-img';
    conf_ok($conf, $dir, 'role egress');
}

# docker-compose: each shared setting reaches every container that reads it
{
    my (%env, $svc, $in);
    for (split /\n/, slurp("$root/docker-compose.yml")) {
        next if /^\s*(#|$)/;
        $svc = $1 if /^  ([a-z]+):\s*$/;
        $in = /^\s+environment:\s*$/ ? 1 : /^\s{4}[a-z_]+:/ ? 0 : $in;
        $env{$svc}{$1} = 1 if $in && /^\s+- ([A-Z][A-Z0-9_]*)/;
    }
    for my $c ([ SMCP_REDIS_PREFIX => qw(nginx egress runner) ],
               [ SMCP_LOG_FORMAT => qw(nginx egress runner) ],
               [ SMCP_REDIS_PASSWORD => qw(nginx egress runner) ],
               [ SMCP_GIT_HOST => qw(nginx runner) ],
               [ SMCP_TENANT_REDIS_BYTES => qw(nginx runner) ],
               [ SMCP_TENANT_DISK => qw(nginx runner) ],
               [ SMCP_TENANT_SESSIONS => qw(nginx) ],
               [ SMCP_NOTIFY_ALLOW => qw(nginx egress) ],
               [ SMCP_NOTIFY_SECRET => qw(runner) ],
               [ SMCP_AGENTS => qw(nginx) ],
               [ SMCP_AGENT_IMAGES => qw(runner) ]) {
        my ($name, @svcs) = @$c;
        my @not = grep { !$env{$_}{$name} } @svcs;
        ok(!@not, "docker-compose: $name reaches @svcs") or diag("not: @not");
    }
}

$t->done;
