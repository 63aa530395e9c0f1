#!/usr/bin/perl

# The choice of agent (issue 26, point 3) through the MCP endpoint, against
# a real Redis (no runner: t/agents.t runs the agents in sandboxes):
# sandbox_mcp_agents says which agents a location offers, and the
# run_task definition tools/list shows there lists only those; a run
# names one (`agent`) or gets its session's, else the first offered; an
# agent with a model of its own runs it when the run names none; the
# refusals (an agent not offered, another agent in a session, a model
# the agent does not run, an image for another agent) write nothing; a
# configuration naming an unknown agent, or a model an agent does not
# run, is refused by nginx -t; a message for a run of another agent than
# OpenCode is refused (nothing in its sandbox takes it).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(tool_ok tool_err);

my $t = SMCP::Test->new(
    workers  => 2,
    location => q{
            sandbox_mcp_default_model anthropic/claude-sonnet-4-5;
            sandbox_mcp_images other:1;
            sandbox_mcp_agents claude-code codex=openai/gpt-5-codex opencode;},
    server   => q{
        location /plain/ {
            sandbox_mcp;
            sandbox_mcp_max_body 1m;
        }},
);
$t->start;

my $P = 'smcp:';
my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session');

sub call { my ($name, $args, %o) = @_; return scalar $t->call_tool($sid, $name, $args, %o) }

sub hash {
    my $r = $t->redis('HGETALL', $_[0]);
    return ref $r eq 'HASH' ? $r : { @{ $r || [] } };
}

sub agent_enum {
    my (%o) = @_;
    my $r = $t->rpc($o{sid} // $sid, 'tools/list', {}, %o);
    my ($rt) = grep { $_->{name} eq 'opencode_run_task' } @{ $r->{json}{result}{tools} || [] };
    return $rt && $rt->{inputSchema}{properties}{agent}{enum};
}

subtest 'tools/list: the agents this location offers' => sub {
    is_deeply(agent_enum(), [ qw(claude-code codex opencode) ],
              'run_task lists the agents offered, in order');
    my ($psid) = $t->initialize(path => '/plain/');
    is_deeply(agent_enum(sid => $psid, path => '/plain/'), [ 'opencode' ],
              'a location offering none: opencode alone');
};

subtest 'refusals write nothing' => sub {
    my $keys = $t->redis('DBSIZE');
    tool_err(call('opencode_run_task', { task => 't', agent => 'aider' }),
             qr/'agent' must be one of/, 'an agent nobody knows');
    tool_err(call('opencode_run_task', { task => 't', agent => 'codex',
                                         model => 'anthropic/claude-sonnet-4-5' }),
             qr/the agent codex runs openai models \(openai\/\.\.\.\), not anthropic\/claude-sonnet-4-5/,
             'codex with an Anthropic model');
    tool_err(call('opencode_run_task', { task => 't', agent => 'claude-code',
                                         image => 'other:1' }),
             qr/'image' is for OpenCode's runs: claude-code runs in its own image/,
             'an image for claude-code');
    is($t->redis('DBSIZE'), $keys, '... no key written');
};

subtest 'a run of each agent; a session keeps its agent' => sub {
    my $cc = tool_ok(call('opencode_run_task', { task => 'a' }), 'no agent named');
    my $h = hash("${P}run:$cc->{runId}");
    is($h->{agent}, 'claude-code', '... the first offered');
    is($h->{model}, 'anthropic/claude-sonnet-4-5', '... the default model (it has none of its own)');

    my $cx = tool_ok(call('opencode_run_task', { task => 'b', agent => 'codex' }), 'codex');
    $h = hash("${P}run:$cx->{runId}");
    is($h->{agent}, 'codex', '... agent codex');
    is($h->{model}, 'openai/gpt-5-codex', '... its own model');
    is($t->redis('HGET', "${P}session:$cx->{sessionId}", 'agent'), 'codex',
       '... its session: codex');

    my $keys = $t->redis('DBSIZE');
    tool_err(call('opencode_run_task', { task => 'c', sessionId => $cx->{sessionId},
                                         agent => 'opencode' }),
             qr/runs the agent codex: a session keeps its agent/, 'another agent in the session');
    is($t->redis('DBSIZE'), $keys, '... no key written');

    my $up = tool_ok(call('opencode_run_task', { task => 'd', sessionId => $cx->{sessionId},
                                                 model => 'openai/gpt-5.1', image => 'other:1' }),
                     'a follow-up naming no agent (and an image)');
    $h = hash("${P}run:$up->{runId}");
    is($h->{agent}, 'codex', "... the session's agent");
    is($h->{model}, 'openai/gpt-5.1', '... the model named');
    is($h->{image}, '', "... no image: codex runs in its own");

    tool_err(call('opencode_send_message', { runId => $cx->{runId}, message => 'also X' }),
             qr/runs the agent codex, which takes no message while it runs/,
             'a message for a codex run: refused');
    is($t->redis('LLEN', "${P}run:$cx->{runId}:inbox"), 0, '... nothing in its inbox');

    my $oc = tool_ok(call('opencode_run_task', { task => 'e', agent => 'opencode',
                                                 image => 'other:1' }),
                     'opencode in an image of its choice');
    is($t->redis('HGET', "${P}run:$oc->{runId}", 'agent'), 'opencode', '... agent opencode');
};

subtest 'nginx -t refuses a wrong sandbox_mcp_agents' => sub {
    for my $c ([ 'aider', qr/unknown agent "aider"/ ],
               [ 'codex=anthropic/claude-sonnet-4-5', qr/agent "codex": "anthropic\/claude-sonnet-4-5" is no model it runs/ ],
               [ 'opencode opencode', qr/agent "opencode" given twice/ ]) {
        my ($rc, $out) = $t->location_config_test("sandbox_mcp_agents $c->[0];");
        isnt($rc, 0, "sandbox_mcp_agents $c->[0]: refused");
        like($out, $c->[1], '... saying why');
    }
};

done_testing;
