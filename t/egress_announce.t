#!/usr/bin/env perl
# opencode_run_task refuses at once a run the egress proxy cannot serve.
#
# The egress routes that ship (conf/egress-routes.sh, whose --http part
# says `sandbox_mcp_egress_announce on`) are announced in Redis by the
# egress instance's workers (<prefix>egress:routes: its route names); the
# run_create script holds a run against them.  A run of a model whose
# provider has no route, or on a repository while there is no GitHub route,
# is an isError answer of the call itself naming the setting that gives
# the egress the route (ANTHROPIC_API_KEY, GITHUB_TOKEN, ...) and writing
# nothing: not an agent failure minutes later saying "egress: unknown
# route".  An egress restarted with other settings announces its routes
# anew; a deployment whose egress announced nothing is not checked.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(make_path);
use Test::More;
use SMCP::Test qw(:all);

my $t = SMCP::Test->new(workers => 2);
my $eport = $t->free_port;

# every credential egress-routes.sh knows, unset but those given
my @CREDS = qw(ANTHROPIC_API_KEY OPENAI_API_KEY AZURE_OPENAI_API_KEY
               GOOGLE_API_KEY CF_AIG_TOKEN COMPAT_API_KEY GITHUB_TOKEN
               SMCP_REGISTRIES);

# the egress instance (an nginx of its own, as in make up) started anew
# with the routes of these settings, the others unset: its master reads
# the credentials from its environment at start
sub egress_with {
    my (%env) = @_;
    $t->stop_nginx('egress');
    $t->redis('CONFIG', 'RESETSTAT');
    delete @ENV{@CREDS};
    @ENV{keys %env} = values %env;
    $ENV{$_} = 'http://127.0.0.1:9' for qw(ANTHROPIC_BASE_URL GITHUB_URL GITHUB_API_URL);
    make_path($t->dir . '/egress');
    $t->render_routes(dir => $t->dir . '/egress');
    $t->start_nginx(name => 'egress', http => egress_server_conf("127.0.0.1:$eport"));
    delete @ENV{@CREDS};
}

sub announced {
    my ($want, $what) = @_;
    my $got;
    ok(wait_until(10, sub {
        $got = $t->redis('GET', 'smcp:egress:routes');
        return defined $got && $got eq $want;
    }), "$what: the egress announced \"$want\"") or diag('got ' . ($got // 'nothing'));
    # every worker announces once its connection is made (a SET each:
    # nothing else here writes one): a later one would write the routes
    # again after a test removed them
    my @workers = $t->worker_pids('egress');
    my ($want_n, $n) = (scalar @workers, 0);
    ok(wait_until(10, sub {
        ($n) = ($t->redis('INFO', 'commandstats') // '') =~ /^cmdstat_set:calls=(\d+)/m;
        return ($n // 0) >= $want_n;
    }), "$what: each of the $want_n egress workers announced") or diag(($n // 0) . ' did');
}

# nothing in Redis changes, and the answer is the call's own
sub refused {
    my ($sid, $args, $re, $what) = @_;
    my $before = $t->redis_snapshot;
    my $res = $t->call_tool($sid, 'opencode_run_task', $args);
    SMCP::Test::tool_err($res, $re, $what);
    is_deeply($t->redis_snapshot, $before, "$what: nothing written");
    return SMCP::Test::result_text($res);
}

sub started {
    my ($sid, $args, $what) = @_;
    my $res = $t->call_tool($sid, 'opencode_run_task', $args);
    my $sc = SMCP::Test::tool_ok($res, $what);
    is($sc->{status}, 'started', "$what: started");
    return $sc;
}

my $repo = 'https://github.com/acme/app';

###############################################################################
# a model provider and no GitHub token

# /mcp: no credential in its environment, no route in its configuration
delete @ENV{@CREDS};
$t->start;
egress_with(ANTHROPIC_API_KEY => 'sk-ant-announce');
my $sid = $t->initialize;
ok($sid, 'a session');
announced('inbox anthropic', 'ANTHROPIC_API_KEY only');

started($sid, { task => 'no repository' }, 'an anthropic run without a repository');

my $msg = refused($sid, { task => 'on a repository', repository => $repo },
                  qr/no GitHub route.*sets GITHUB_TOKEN where the egress proxy runs/,
                  'a run on a repository without a GitHub route');
like($msg, qr/leave out 'repository'/, '... and says how to run without one');

$msg = refused($sid, { task => 't', model => 'openai/gpt-5' },
               qr/no openai route.*sets OPENAI_API_KEY where the egress proxy runs/,
               'an openai model without its route');
like($msg, qr{Models it serves: anthropic/\.\.\. \(pass one as 'model'\)},
     '... and names the models it serves');
refused($sid, { task => 't', model => 'cloudflare-ai-gateway/anthropic/claude-sonnet-4-5' },
        qr/no cloudflare route.*sets CF_AIG_TOKEN and CF_AIG_BASE_URL/,
        'a Cloudflare AI Gateway model');
refused($sid, { task => 't', model => 'azure/gpt-5' },
        qr/no azure route.*sets AZURE_OPENAI_API_KEY and AZURE_OPENAI_BASE_URL/,
        'an Azure model');
$msg = refused($sid, { task => 't', model => 'mistral/large' }, qr/no mistral route/,
               'a provider no setting serves');
unlike($msg, qr/The operator sets/, '... names no setting');

###############################################################################
# GitHub added (the egress restarted with GITHUB_TOKEN): a session on a
# repository; removed again: its follow-up is refused

egress_with(ANTHROPIC_API_KEY => 'sk-ant-announce', GITHUB_TOKEN => 'ghp_announce');
announced('inbox anthropic github github-api', 'with GITHUB_TOKEN');
my $run = started($sid, { task => 'on a repository', repository => $repo },
                  'a run on a repository with the GitHub route');

egress_with(ANTHROPIC_API_KEY => 'sk-ant-announce');
announced('inbox anthropic', 'without GITHUB_TOKEN again');
refused($sid, { task => 'follow-up', sessionId => $run->{sessionId} },
        qr/no GitHub route.*GITHUB_TOKEN/,
        'a follow-up of a session on a repository, without a GitHub route');

###############################################################################
# no model provider at all (make up stops first; docker-compose does not)

egress_with(GITHUB_TOKEN => 'ghp_announce');
announced('inbox github github-api', 'GITHUB_TOKEN only');
$msg = refused($sid, { task => 't' },
               qr/no anthropic route.*sets ANTHROPIC_API_KEY where the egress proxy runs/,
               'the default model without any provider');
like($msg, qr/serves no model provider yet: no run can start/, '... and says none can');

###############################################################################
# nothing announced (an egress of an older version, a flushed Redis):
# nothing checked

$t->redis('DEL', 'smcp:egress:routes');
started($sid, { task => 't', model => 'openai/gpt-5', repository => $repo },
        'nothing announced: not checked');

$t->done;
