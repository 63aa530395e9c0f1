#!/usr/bin/perl

# Self-test of the fake upstreams in t/lib/SMCP/Fakes.pm: each fake is
# exercised directly over loopback (no nginx involved).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use HTTP::Tiny;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Fakes qw(parse_sse);
use SMCP::Test qw(json_encode json_decode skip_or_fail);

my $T0 = time();
delete @ENV{qw(http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY)};
$ENV{no_proxy} = $ENV{NO_PROXY} = '127.0.0.1,localhost';
$SIG{PIPE} = 'IGNORE';

my $ua = HTTP::Tiny->new(timeout => 15, keep_alive => 1);

sub post_json {
    my ($url, $body, %h) = @_;
    return $ua->request('POST', $url, {
        headers => { 'content-type' => 'application/json', %h },
        content => ref $body ? json_encode($body) : $body,
    });
}

# a raw HTTP exchange on one connection: sends $raw, reads until the server
# closes (the last request carries Connection: close)
sub raw_exchange {
    my ($port, $raw) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5) or return '';
    binmode $s;
    syswrite($s, $raw);
    my $buf = '';
    my $sel = IO::Select->new($s);
    my $deadline = time() + 10;
    while (time() < $deadline) {
        next unless $sel->can_read(0.2);
        my $r = sysread($s, $buf, 65536, length $buf);
        last unless $r;
    }
    close $s;
    return $buf;
}

##############################################################################
# Anthropic

my $ant = SMCP::Fakes::start_anthropic(
    key => 'sk-ant-real',
    chunk_delay => 0.25,
    script => [
        # 1 s between events: the first one, which waits for nothing, comes
        # well before that on a loaded machine
        { text => 'Hello from the scripted fake model.', delay => 1 },
        { tool_use => { name => 'write',
                        input => { filePath => '/workspace/a.txt', content => "hi\n" } } },
        { error => { status => 429, type => 'rate_limit_error', message => 'slow down',
                     headers => { 'retry-after-ms' => 0 } } },
        { text => 'final answer', delay => 0 },
    ],
);
ok($ant->pid && $ant->port, 'anthropic fake started: ' . $ant->url);
is($ant->base_url, $ant->url . '/v1', 'base_url');

{
    my $r = $ua->get($ant->url . '/');
    is($r->{status}, 200, 'GET / readiness');
    $r = $ua->request('HEAD', $ant->url . '/');
    is($r->{status}, 200, 'HEAD / readiness');
}

my $msg_req = { model => 'claude-sonnet-4-5', max_tokens => 100, stream => JSON::PP::true,
                messages => [ { role => 'user', content => 'hi' } ] };

for my $case (['wrong key', 'x-api-key' => 'sk-ant-sandbox'], ['missing key']) {
    my ($name, @h) = @$case;
    my $r = post_json($ant->url . '/v1/messages', $msg_req,
                      'anthropic-version' => '2023-06-01', @h);
    is($r->{status}, 401, "anthropic $name -> 401");
    is_deeply(json_decode($r->{content}), { type => 'error', error => {
        type => 'authentication_error', message => 'invalid x-api-key' } },
        "anthropic $name -> error shape");
}

# turn 0: a streamed text answer, events arrive one by one
{
    my ($buf, @arrivals) = ('');
    my $t0 = time();
    my $r = $ua->request('POST', $ant->url . '/v1/messages', {
        headers => { 'content-type' => 'application/json', 'x-api-key' => 'sk-ant-real',
                     'anthropic-version' => '2023-06-01' },
        content => json_encode($msg_req),
        data_callback => sub {
            $buf .= $_[0];
            my $n = () = $buf =~ /\n\n/g;
            push @arrivals, [time() - $t0, $n];
        },
    });
    my $total = time() - $t0;
    is($r->{status}, 200, 'stream: 200');
    like($r->{headers}{'content-type'}, qr{^text/event-stream}, 'stream: content type');
    my @ev = parse_sse($buf);
    my @names = map { $_->{event} } @ev;
    is_deeply([ @names[0, 1] ], [qw(message_start content_block_start)], 'stream: starts');
    is_deeply([ @names[-3 .. -1] ], [qw(content_block_stop message_delta message_stop)],
              'stream: ends');
    my @deltas = grep { $_->{event} eq 'content_block_delta' } @ev;
    ok(@deltas >= 2, 'stream: several content_block_delta events');
    is(scalar(@ev), 5 + @deltas, 'stream: nothing else in the sequence');
    is(join('', map { $_->{json}{delta}{text} } @deltas),
       'Hello from the scripted fake model.', 'stream: text deltas concatenate');
    ok(!grep({ $_->{json}{delta}{type} ne 'text_delta' } @deltas), 'stream: text_delta type');
    is($ev[0]{json}{type}, 'message_start', 'stream: data type matches event');
    is($ev[0]{json}{message}{model}, 'claude-sonnet-4-5', 'stream: model echoed');
    ok($ev[0]{json}{message}{usage}{input_tokens} > 0, 'stream: message_start usage');
    is($ev[-2]{json}{delta}{stop_reason}, 'end_turn', 'stream: stop_reason end_turn');
    ok($ev[-2]{json}{usage}{output_tokens} > 0, 'stream: message_delta usage');
    # this turn's 1 s between events: the first arrives long before the last
    my ($first) = grep { $_->[1] >= 1 } @arrivals;
    my ($last) = grep { $_->[1] >= @ev } @arrivals;
    ok($first && $last, 'stream: arrival times recorded');
    my $span = $last->[0] - $first->[0];
    cmp_ok($first->[0], '<', 1, 'stream: first event at once (before the 1 s the next waits)');
    cmp_ok($span, '>=', 1 * (@ev - 1) * 0.8, "stream: events spread over time ($span s)");
    cmp_ok(scalar(grep { $_->[1] > 0 && $_->[1] < @ev } @arrivals), '>=', 3,
           'stream: arrived in several reads');
    diag(sprintf "first event %.3fs, last %.3fs, total %.3fs", $first->[0], $last->[0], $total)
        if $ENV{TEST_VERBOSE};
}

# turn 1: a streamed tool_use
{
    my $r = post_json($ant->url . '/v1/messages', $msg_req, 'x-api-key' => 'sk-ant-real');
    is($r->{status}, 200, 'tool_use: 200');
    my @ev = parse_sse($r->{content});
    my ($start) = grep { $_->{event} eq 'content_block_start' } @ev;
    is($start->{json}{content_block}{type}, 'tool_use', 'tool_use: block type');
    is($start->{json}{content_block}{name}, 'write', 'tool_use: name');
    like($start->{json}{content_block}{id}, qr/^toolu_/, 'tool_use: id');
    my $js = join('', map { $_->{json}{delta}{partial_json} }
                      grep { ($_->{json}{delta}{type} // '') eq 'input_json_delta' } @ev);
    is_deeply(json_decode($js), { filePath => '/workspace/a.txt', content => "hi\n" },
              'tool_use: input_json_delta concatenates to the input');
    my ($md) = grep { $_->{event} eq 'message_delta' } @ev;
    is($md->{json}{delta}{stop_reason}, 'tool_use', 'tool_use: stop_reason');
}

# turn 2: scripted error; turn 3 (then repeated): non-stream message
{
    my $r = post_json($ant->url . '/v1/messages', $msg_req, 'x-api-key' => 'sk-ant-real');
    is($r->{status}, 429, 'error turn: status');
    is($r->{headers}{'retry-after-ms'}, '0', 'error turn: extra header');
    is_deeply(json_decode($r->{content}), { type => 'error', error => {
        type => 'rate_limit_error', message => 'slow down' } }, 'error turn: shape');

    my %nons = (%$msg_req, stream => JSON::PP::false);
    for my $i (1, 2) {
        $r = post_json($ant->url . '/v1/messages', \%nons, 'x-api-key' => 'sk-ant-real');
        is($r->{status}, 200, "non-stream $i: 200");
        like($r->{headers}{'content-type'}, qr{^application/json}, "non-stream $i: JSON");
        my $m = json_decode($r->{content});
        is($m->{type}, 'message', "non-stream $i: type message");
        is_deeply($m->{content}, [ { type => 'text', text => 'final answer' } ],
                  "non-stream $i: content (last turn repeats)");
        is($m->{stop_reason}, 'end_turn', "non-stream $i: stop_reason");
        ok($m->{usage}{input_tokens} && $m->{usage}{output_tokens}, "non-stream $i: usage");
    }
}

# the request log
{
    my @all = $ant->requests;
    my @msgs = $ant->requests(path => '/v1/messages');
    is(scalar(@msgs), 7, 'log: 7 requests to /v1/messages');
    is(scalar(@all), 9, 'log: 9 requests in all');
    is_deeply([ map { $_->{status} } @msgs ], [401, 401, 200, 200, 429, 200, 200], 'log: statuses');
    is_deeply([ map { $_->{turn} } @msgs[2 .. 6] ], [0 .. 4], 'log: rejected requests used no turn');
    is($msgs[0]{headers}{'x-api-key'}, 'sk-ant-sandbox', 'log: headers (lower-case names)');
    is($msgs[2]{headers}{'anthropic-version'}, '2023-06-01', 'log: anthropic-version');
    is($msgs[2]{json}{model}, 'claude-sonnet-4-5', 'log: JSON body decoded');
    is($msgs[2]{body_length}, length(json_encode($msg_req)), 'log: body length');
    ok($msgs[2]{time} && $msgs[2]{method} eq 'POST', 'log: time, method');
    ok(grep({ $_->[0] eq 'x-api-key' } @{ $msgs[2]{header_list} }), 'log: header_list');
    is(ref(scalar $ant->requests), 'ARRAY', 'requests in scalar context: array ref');
}

# keep-alive on one raw connection; Content-Length then chunked with Expect
{
    my $b1 = '{"model":"m","max_tokens":5,"messages":[]}';
    my $b2 = '{"model":"m","max_tokens":5,"messages":[],"x":"chunked"}';
    my $raw = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-ant-real\r\n"
            . "Content-Type: application/json\r\nContent-Length: " . length($b1) . "\r\n\r\n$b1"
            . "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-ant-real\r\n"
            . "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            . "Connection: close\r\n\r\n"
            . sprintf("%x\r\n%s\r\n", 10, substr($b2, 0, 10))
            . sprintf("%x;ext=1\r\n%s\r\n", length($b2) - 10, substr($b2, 10))
            . "0\r\n\r\n";
    my $out = raw_exchange($ant->port, $raw);
    my @st = $out =~ /HTTP\/1\.1 (\d{3}) /g;
    is_deeply(\@st, [200, 200], 'keep-alive: two responses on one connection');
    like($out, qr/Connection: keep-alive.*Connection: close/s, 'keep-alive, then close');
    my @l = $ant->requests(path => '/v1/messages');
    is($l[-1]{conn}, $l[-2]{conn}, 'keep-alive: same connection in the log');
    is_deeply([ $l[-2]{seq}, $l[-1]{seq} ], [1, 2], 'keep-alive: seq');
    is($l[-1]{json}{x}, 'chunked', 'chunked request body decoded');
    ok($l[-1]{chunked}, 'chunked request logged');

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $ant->port);
    syswrite($s, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-ant-real\r\n"
               . "Expect: 100-continue\r\nContent-Length: " . length($b1)
               . "\r\nConnection: close\r\n\r\n");
    my $got = '';
    IO::Select->new($s)->can_read(3) and sysread($s, $got, 1000);
    like($got, qr{^HTTP/1\.1 100 Continue\r\n\r\n}, 'Expect: 100-continue answered');
    syswrite($s, $b1);
    local $/;
    my $rest = <$s>;
    like($rest // '', qr{^HTTP/1\.1 200 }, 'then the response');
    close $s;
}

# per-model scripts, hang (concurrency), set_script at run time
my $ant2 = SMCP::Fakes::start_anthropic(
    key => 'k2',
    script => [ { hang => 10 }, { text => 'after the hang' } ],
    scripts => { 'small-model' => [ { text => 'A title' } ] },
);
{
    my $r = post_json($ant2->url . '/v1/messages', { model => 'small-model', stream => 0 },
                      'x-api-key' => 'k2');
    is(json_decode($r->{content})->{content}[0]{text}, 'A title', 'per-model script');

    my $t0 = time();
    my $short = HTTP::Tiny->new(timeout => 1);
    $r = $short->request('POST', $ant2->url . '/v1/messages', {
        headers => { 'x-api-key' => 'k2' }, content => '{"model":"big"}' });
    is($r->{status}, 599, 'hang: the client times out');
    $r = post_json($ant2->url . '/v1/messages', { model => 'big' }, 'x-api-key' => 'k2');
    my $dt = time() - $t0;
    is(json_decode($r->{content})->{content}[0]{text}, 'after the hang',
       'hang: another connection is served meanwhile');
    # (the client's 1 s included) well before the hung one's 10 s end
    cmp_ok($dt, '<', 8, sprintf('hang: without waiting for the hung one (%.2f s)', $dt));
    my ($hung) = grep { $_->{hang} } $ant2->requests;
    ok($hung && $hung->{status} == 0, 'hang: logged with status 0');

    $ant2->set_script([ { text => 'new script' }, { tool_use => { name => 'bash',
                                                                   input => { command => 'ls' } } } ]);
    $r = post_json($ant2->url . '/v1/messages', { model => 'big' }, 'x-api-key' => 'k2');
    is(json_decode($r->{content})->{content}[0]{text}, 'new script', 'set_script: first turn');
    $r = post_json($ant2->url . '/v1/messages', { model => 'big' }, 'x-api-key' => 'k2');
    is(json_decode($r->{content})->{content}[0]{name}, 'bash', 'set_script: second turn');

    $ant2->set_script([ { text => 'partial answer here', abort_after => 3 } ]);
    $r = post_json($ant2->url . '/v1/messages', { model => 'big', stream => 1 }, 'x-api-key' => 'k2');
    ok($r->{status} == 599 || $r->{content} !~ /message_stop/, 'abort_after: stream cut short');
}

##############################################################################
# OpenAI-compatible

my $oai = SMCP::Fakes::start_openai(
    key => 'sk-openai-real', chunk_delay => 0.1,
    script => [
        { text => 'Hello from the OpenAI fake.' },
        { tool_use => { name => 'read', input => { filePath => '/x' } } },
        { text => 'plain' },
    ],
);
{
    my $req = { model => 'gpt-4o', stream => JSON::PP::true,
                stream_options => { include_usage => JSON::PP::true },
                messages => [ { role => 'user', content => 'hi' } ] };
    my $r = post_json($oai->url . '/v1/chat/completions', $req,
                      authorization => 'Bearer sk-sandbox');
    is($r->{status}, 401, 'openai wrong key -> 401');
    my $e = json_decode($r->{content});
    is($e->{error}{code}, 'invalid_api_key', 'openai 401: error.code');
    is($e->{error}{type}, 'invalid_request_error', 'openai 401: error.type');
    ok(exists $e->{error}{param} && exists $e->{error}{message}, 'openai 401: shape');
    $r = post_json($oai->url . '/v1/chat/completions', $req);
    is($r->{status}, 401, 'openai missing key -> 401');

    $r = post_json($oai->url . '/v1/chat/completions', $req,
                   authorization => 'Bearer sk-openai-real');
    is($r->{status}, 200, 'openai stream: 200');
    like($r->{headers}{'content-type'}, qr{^text/event-stream}, 'openai stream: content type');
    my @ev = parse_sse($r->{content});
    is($ev[-1]{data}, '[DONE]', 'openai stream: ends with [DONE]');
    my @chunks = map { $_->{json} } @ev[0 .. $#ev - 1];
    ok(!grep({ $_->{object} ne 'chat.completion.chunk' } @chunks), 'openai stream: chunk objects');
    is($chunks[0]{choices}[0]{delta}{role}, 'assistant', 'openai stream: role first');
    is(join('', map { $_->{choices}[0]{delta}{content} // '' } grep { @{ $_->{choices} } } @chunks),
       'Hello from the OpenAI fake.', 'openai stream: content concatenates');
    my ($fin) = grep { @{ $_->{choices} } && $_->{choices}[0]{finish_reason} } @chunks;
    is($fin->{choices}[0]{finish_reason}, 'stop', 'openai stream: finish_reason');
    ok($chunks[-1]{usage}{total_tokens}, 'openai stream: usage chunk (include_usage)');

    $r = post_json($oai->url . '/v1/chat/completions', $req,
                   authorization => 'Bearer sk-openai-real');
    @ev = parse_sse($r->{content});
    my @tc = map { @{ $_->{json}{choices}[0]{delta}{tool_calls} || [] } }
             grep { $_->{json} && @{ $_->{json}{choices} } } @ev;
    is($tc[0]{function}{name}, 'read', 'openai stream: tool call name');
    is_deeply(json_decode(join('', map { $_->{function}{arguments} } @tc)), { filePath => '/x' },
              'openai stream: tool call arguments');

    $r = post_json($oai->url . '/v1/chat/completions', { %$req, stream => JSON::PP::false },
                   authorization => 'Bearer sk-openai-real');
    my $c = json_decode($r->{content});
    is($c->{object}, 'chat.completion', 'openai non-stream: object');
    is($c->{choices}[0]{message}{content}, 'plain', 'openai non-stream: content');
    is($c->{choices}[0]{finish_reason}, 'stop', 'openai non-stream: finish_reason');
    ok($c->{usage}{prompt_tokens} && $c->{usage}{completion_tokens}, 'openai non-stream: usage');
    is(scalar(my @oreq = $oai->requests(path => '/v1/chat/completions', method => 'POST')), 5,
       'openai: requests logged');
}

##############################################################################
# GitHub: git smart HTTP through git http-backend, and REST

SKIP: {
    my $has_git = system('git --version >/dev/null 2>&1') == 0
        && -x (`git --exec-path 2>/dev/null` =~ s/\s+$//r) . '/git-http-backend';
    skip_or_fail('git or git-http-backend missing', 1) unless $has_git;

    my $gh = SMCP::Fakes::start_github_git(token => 'ghs_real');
    my $sha0 = $gh->create_repo('acme/widgets',
        files => { 'README.md' => "hello\n", 'src/a.txt' => "a\n" });
    like($sha0, qr/^[0-9a-f]{40}$/, 'create_repo: initial commit');
    is($gh->ref_commit('acme/widgets', 'main'), $sha0, 'ref_commit');
    is($gh->file_content('acme/widgets', 'main', 'src/a.txt'), "a\n", 'file_content');
    is_deeply([ $gh->files('acme/widgets', 'main') ], ['README.md', 'src/a.txt'], 'files');

    my $r = $ua->get($gh->url . '/acme/widgets.git/info/refs?service=git-upload-pack');
    is($r->{status}, 401, 'git: no credentials -> 401');
    is($r->{headers}{'www-authenticate'}, 'Basic realm="GitHub"', 'git: WWW-Authenticate');
    $r = $ua->get($gh->url . '/acme/widgets.git/info/refs?service=git-upload-pack',
        { headers => { authorization => 'Basic ' . encode_base64('x-access-token:ghs_real', '') } });
    is($r->{status}, 200, 'git: info/refs with the token');
    is($r->{headers}{'content-type'}, 'application/x-git-upload-pack-advertisement',
       'git: CGI headers relayed');

    local $ENV{GIT_CONFIG_NOSYSTEM} = 1;
    local $ENV{GIT_CONFIG_GLOBAL} = '/dev/null';
    local $ENV{GIT_TERMINAL_PROMPT} = 0;
    local $ENV{GIT_ASKPASS} = '/bin/false';
    local $ENV{SSH_ASKPASS} = '/bin/false';
    my $work = tempdir('smcp-fakes-t-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my @id = ('-c', 'user.name=Sandbox Agent', '-c', 'user.email=agent@example.invalid');
    my $q = sub { system(@_, ) == 0 };
    my $quiet = sub { my $pid = fork; if (!$pid) { open STDOUT, '>', '/dev/null';
                      open STDERR, '>', "$work/git.err"; exec @_; exit 127 }
                      waitpid($pid, 0); return $? == 0 };

    ok($quiet->('git', $gh->git_auth_args, 'clone', '-q', $gh->clone_url('acme/widgets'),
                "$work/clone"), 'git clone with http.extraHeader');
    ok(-f "$work/clone/src/a.txt", 'clone: files checked out');

    open(my $fh, '>', "$work/clone/new.txt") or die;
    print $fh "pushed\n";
    close $fh;
    ok($quiet->('git', '-C', "$work/clone", @id, 'add', 'new.txt')
       && $quiet->('git', '-C', "$work/clone", @id, 'commit', '-q', '-m', 'Add new.txt'),
       'local commit');
    chomp(my $local = `git -C $work/clone rev-parse HEAD`);
    ok($quiet->('git', '-C', "$work/clone", $gh->git_auth_args, 'push', '-q', 'origin',
                'HEAD:main', 'HEAD:refs/heads/feature'), 'git push');
    is($gh->ref_commit('acme/widgets', 'main'), $local, 'pushed main in the bare repo');
    is($gh->ref_commit('acme/widgets', 'refs/heads/feature'), $local, 'pushed a new branch');
    is($gh->file_content('acme/widgets', 'feature', 'new.txt'), "pushed\n",
       'pushed file content');
    is($gh->commit_message('acme/widgets', 'main'), 'Add new.txt', 'commit_message');
    is_deeply([ sort keys %{ $gh->refs('acme/widgets') } ],
              ['refs/heads/feature', 'refs/heads/main'], 'refs');

    # a push above http.postBuffer (1 MB): git sends a chunked request body
    open($fh, '>', "$work/clone/big.bin") or die;
    print $fh pack('N*', map { int(rand(4294967296)) } 1 .. 400_000);
    close $fh;
    ok($quiet->('git', '-C', "$work/clone", @id, 'add', 'big.bin')
       && $quiet->('git', '-C', "$work/clone", @id, 'commit', '-q', '-m', 'Add big.bin')
       && $quiet->('git', '-C', "$work/clone", $gh->git_auth_args, 'push', '-q', 'origin',
                   'HEAD:refs/heads/big'), 'large push');
    is(length($gh->file_content('acme/widgets', 'big', 'big.bin') // ''), 1_600_000,
       'large push: file in the bare repo');
    ok(grep({ $_->{chunked} && $_->{path} =~ /git-receive-pack$/ && $_->{status} == 200
              && $_->{body_length} > 1_600_000 } $gh->requests),
       'large push: chunked receive-pack body relayed to http-backend');
    $quiet->('git', '-C', "$work/clone", 'reset', '-q', '--hard', 'HEAD~1');

    ok(!$quiet->('git', $gh->git_auth_args('ghs_wrong'), 'clone', '-q',
                 $gh->clone_url('acme/widgets'), "$work/bad"), 'clone with a wrong token fails');
    ok(!$quiet->('git', 'clone', '-q', $gh->clone_url('acme/widgets'), "$work/bad2"),
       'clone without a token fails');
    $gh->commit_files('acme/widgets', branch => 'main', files => { 'up.txt' => "x\n" },
                      message => 'upstream change');
    my $before = $gh->ref_commit('acme/widgets', 'main');
    ok(!$quiet->('git', '-C', "$work/clone", $gh->git_auth_args('ghs_wrong'), 'push', '-q',
                 'origin', 'HEAD:refs/heads/evil'), 'push with a wrong token fails');
    ok(!$gh->ref_commit('acme/widgets', 'evil'), 'nothing pushed with a wrong token');
    ok($quiet->('git', '-C', "$work/clone", $gh->git_auth_args, 'pull', '-q', '--ff-only',
                'origin', 'main'), 'fetch the upstream commit');
    ok(-f "$work/clone/up.txt", 'commit_files commit fetched');
    ok(!$quiet->('git', $gh->git_auth_args, 'clone', '-q', $gh->url . '/acme/nope.git',
                 "$work/nope"), 'unknown repository: clone fails');

    my @svc = map { $_->{service} // '-' } grep { $_->{status} == 200 } $gh->requests;
    ok((grep { $_ eq 'git-upload-pack' } @svc) && (grep { $_ eq 'git-receive-pack' } @svc),
       'log: upload-pack and receive-pack requests');
    my @bad = grep { ($_->{auth} // '') eq 'bad' } $gh->requests;
    ok(@bad >= 2 && !grep({ $_->{status} != 401 } @bad), 'log: wrong-token requests got 401');
    my ($gp) = grep { ($_->{headers}{'git-protocol'} // '') =~ /version=2/ } $gh->requests;
    ok($gp, 'log: Git-Protocol header recorded');

    # REST, sharing the git root
    my $api = SMCP::Fakes::start_github_api(token => 'ghs_real', git => $gh,
                                            repos => ['acme/only-api']);
    my %auth = (authorization => 'Bearer ghs_real', accept => 'application/vnd.github+json');
    $r = $ua->get($api->url . '/repos/acme/widgets', { headers => \%auth });
    is($r->{status}, 200, 'REST: repo lookup');
    my $repo = json_decode($r->{content});
    is($repo->{full_name}, 'acme/widgets', 'REST: full_name');
    is($repo->{default_branch}, 'main', 'REST: default_branch');
    is($repo->{html_url}, 'https://github.com/acme/widgets', 'REST: html_url');
    is($repo->{clone_url}, 'https://github.com/acme/widgets.git', 'REST: clone_url');
    $r = $ua->get($api->url . '/repos/acme/widgets',
                  { headers => { authorization => 'token ghs_real' } });
    is($r->{status}, 200, 'REST: "token" scheme accepted');
    $r = $ua->get($api->url . '/repos/acme/only-api', { headers => \%auth });
    is($r->{status}, 200, 'REST: repos option');
    for my $h ({ authorization => 'Bearer ghs_sandbox' }, {}) {
        $r = $ua->get($api->url . '/repos/acme/widgets', { headers => $h });
        is($r->{status}, 401, 'REST: bad credentials -> 401');
        is(json_decode($r->{content})->{message}, 'Bad credentials', 'REST: 401 message');
    }
    $r = $ua->get($api->url . '/repos/acme/nope', { headers => \%auth });
    is($r->{status}, 404, 'REST: unknown repo -> 404');
    is(json_decode($r->{content})->{message}, 'Not Found', 'REST: 404 message');

    $r = post_json($api->url . '/repos/acme/widgets/pulls',
                   { title => 'Add new.txt', head => 'feature', base => 'main', body => 'desc' },
                   %auth);
    is($r->{status}, 201, 'REST: PR created');
    my $pr = json_decode($r->{content});
    is($pr->{number}, 1, 'PR number');
    is($pr->{html_url}, 'https://github.com/acme/widgets/pull/1', 'PR html_url');
    is($pr->{state}, 'open', 'PR state');
    is($pr->{head}{ref}, 'feature', 'PR head');
    is($pr->{head}{sha}, $local, 'PR head sha from the bare repo');
    is($pr->{base}{ref}, 'main', 'PR base');
    is($r->{headers}{location}, $pr->{url}, 'PR Location header');
    $r = post_json($api->url . '/repos/acme/widgets/pulls',
                   { title => 'again', head => 'feature', base => 'main' }, %auth);
    is($r->{status}, 422, 'REST: duplicate PR -> 422');
    $r = post_json($api->url . '/repos/acme/widgets/pulls',
                   { title => 'x', head => 'no-such-branch', base => 'main' }, %auth);
    is($r->{status}, 422, 'REST: unknown head -> 422');
    is(json_decode($r->{content})->{message}, 'Validation Failed', 'REST: 422 message');
    $r = $ua->get($api->url . '/repos/acme/widgets/pulls', { headers => \%auth });
    my $list = json_decode($r->{content});
    is(scalar(@$list), 1, 'REST: PR list');
    is($list->[0]{title}, 'Add new.txt', 'REST: PR list title');
    $r = $ua->get($api->url . '/repos/acme/widgets/pulls/1', { headers => \%auth });
    is(json_decode($r->{content})->{body}, 'desc', 'REST: get one PR');
    is(scalar(my @p = $api->pulls('acme/widgets')), 1, 'pulls() helper');
    my ($post) = $api->requests(path => '/repos/acme/widgets/pulls', method => 'POST');
    is($post->{json}{head}, 'feature', 'REST: request body logged');

    # combined git + REST on one port
    my $both = SMCP::Fakes::start_github(token => 'ghs_both');
    $both->create_repo('o/r');
    $r = $ua->get($both->url . '/repos/o/r', { headers => { authorization => 'Bearer ghs_both' } });
    is($r->{status}, 200, 'start_github: REST');
    $r = $ua->get($both->url . '/o/r.git/info/refs?service=git-upload-pack',
        { headers => { authorization => 'Basic ' . encode_base64('x-access-token:ghs_both', '') } });
    is($r->{status}, 200, 'start_github: git');
    $r = $ua->get($both->url . '/o/r/info/refs?service=git-upload-pack',
        { headers => { authorization => 'Basic ' . encode_base64('x-access-token:ghs_both', '') } });
    is($r->{status}, 200, 'start_github: git without the .git suffix');
    # $both is left running: END stops it
}

##############################################################################
# stop

for my $f ($ant, $oai) {
    my ($pid, $port) = ($f->pid, $f->port);
    $f->stop;
    ok(!kill(0, $pid), $f->kind . ': server process gone after stop');
    ok(!IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp'),
       $f->kind . ': port closed after stop');
    ok(scalar($f->requests), $f->kind . ': log still readable after stop');
}

note(sprintf('finished in %.1f s', time() - $T0));
done_testing();
