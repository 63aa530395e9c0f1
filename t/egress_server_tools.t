#!/usr/bin/env perl
# The provider's server-side tools (issue 22, point 9): a model request
# through the egress proxy may ask the provider to search the web, fetch
# URLs, run code or call MCP servers on the agent's behalf, on the
# operator's key.  Every model route reads the body before anything goes
# upstream and refuses such a request with a JSON 403 naming the tool and
# the setting (sandbox_mcp_egress_server_tools, SMCP_<ROUTE>_SERVER_TOOLS),
# unless the route allows it; the agent's own function tools pass.  Each
# provider's format, streaming and not, on the routes egress-routes.sh
# renders, in front of the fake providers: Anthropic Messages (server
# tools, mcp_servers, container, sources by URL), OpenAI Responses (on
# /openai and /azure), Chat Completions (/compat), Gemini (/google), and
# the three vendors behind /cloudflare.  Hostile bodies: duplicate keys,
# escapes in key names and values, deep nesting, a BOM, invalid UTF-8,
# text after the object, Content-Encoding, another Content-Type, a body
# large enough for nginx's temporary file with the tool at its end.  A
# refused request never reaches the provider.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);
use SMCP::Fakes qw(parse_sse);

my %real = (
    ANTHROPIC_API_KEY    => 'sk-ant-REAL-' . rhex(),
    OPENAI_API_KEY       => 'sk-openai-REAL-' . rhex(),
    AZURE_OPENAI_API_KEY => 'azure-REAL-' . rhex(),
    GOOGLE_API_KEY       => 'goog-REAL-' . rhex(),
    CF_AIG_TOKEN         => 'cfaig-REAL-' . rhex(),
    COMPAT_API_KEY       => 'sk-compat-REAL-' . rhex(),
);

my $t = SMCP::Test->new(workers => 2);

my %fake = (
    anthropic  => SMCP::Fakes::start_anthropic(key => $real{ANTHROPIC_API_KEY}),
    openai     => SMCP::Fakes::start_openai(key => $real{OPENAI_API_KEY}),
    azure      => SMCP::Fakes::start_azure(key => $real{AZURE_OPENAI_API_KEY}),
    google     => SMCP::Fakes::start_gemini(key => $real{GOOGLE_API_KEY}),
    compat     => SMCP::Fakes::start_openai(key => $real{COMPAT_API_KEY}),
    cloudflare => SMCP::Fakes::start_cloudflare(token => $real{CF_AIG_TOKEN},
                                                account => 'acct', gateway => 'gw'),
);

local @ENV{keys %real} = values %real;
local $ENV{ANTHROPIC_BASE_URL} = $fake{anthropic}->url;
local $ENV{OPENAI_BASE_URL} = $fake{openai}->url;
local $ENV{AZURE_OPENAI_BASE_URL} = $fake{azure}->url;
local $ENV{GOOGLE_BASE_URL} = $fake{google}->url;
local $ENV{COMPAT_BASE_URL} = $fake{compat}->url;
local $ENV{CF_AIG_BASE_URL} = $fake{cloudflare}->base_url;
local $ENV{SMCP_EGRESS_RATE} = '1000r/s';

ok(eval { $t->render_routes }, 'egress-routes.sh renders the routes') or diag($@);
# a second egress server whose routes allow some tools
ok(eval { $t->render_routes(name => 'allow',
                            SMCP_ANTHROPIC_SERVER_TOOLS => 'web_search,web_fetch',
                            SMCP_GOOGLE_SERVER_TOOLS => 'google_search',
                            SMCP_OPENAI_SERVER_TOOLS => 'all') },
   '... and with SMCP_<ROUTE>_SERVER_TOOLS') or diag($@);
like($t->read_file('allow.conf'), qr/sandbox_mcp_egress_server_tools web_search web_fetch;/,
     '... which become sandbox_mcp_egress_server_tools');
ok(!eval { $t->render_routes(name => 'bad', SMCP_ANTHROPIC_SERVER_TOOLS => 'web search;') },
   'a bad SMCP_ANTHROPIC_SERVER_TOOLS is an error');

my $eport = $t->free_port;
my $aport = $t->free_port;
$t->start(http => egress_server_conf("127.0.0.1:$eport")
                 . "    server {\n        listen 127.0.0.1:$aport;\n"
                 . "        include %%DIR%%/allow.conf;\n    }\n");

my ($run, $tok) = $t->live_run;

# the path and credential header of a route's one endpoint
my %route = (
    anthropic => [ '/anthropic/v1/messages', 'x-api-key' ],
    openai    => [ '/openai/v1/responses', 'Authorization' ],
    azure     => [ '/azure/openai/v1/responses', 'api-key' ],
    google    => [ '/google/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse',
                   'x-goog-api-key' ],
    compat    => [ '/compat/v1/chat/completions', 'Authorization' ],
    'cf-anthropic' => [ '/cloudflare/anthropic/v1/messages', 'cf-aig-authorization' ],
    'cf-openai'    => [ '/cloudflare/openai/responses', 'cf-aig-authorization' ],
    'cf-google'    => [ '/cloudflare/google-ai-studio/v1beta/models/gemini-2.5-pro:'
                        . 'streamGenerateContent?alt=sse', 'cf-aig-authorization' ],
);

sub post {
    my ($route, $body, %o) = @_;
    my ($path, $h) = @{ $route{$route} };
    my $v = $h eq 'x-api-key' || $h eq 'api-key' || $h eq 'x-goog-api-key' ? $tok
          : "Bearer $tok";
    return $t->http(port => $o{port} // $eport, method => 'POST', path => $path,
                    headers => [ $h => $v, 'anthropic-version' => '2023-06-01',
                                 'Content-Type' => $o{type} // 'application/json',
                                 @{ $o{headers} // [] } ],
                    body => ref $body ? json_encode($body) : $body, timeout => 30);
}

# the requests a route's fake has seen
sub seen {
    my ($route) = @_;
    my $f = $fake{ $route =~ /^cf-/ ? 'cloudflare' : $route };
    return scalar @{ $f->requests };
}

my $T = JSON::PP::true();
my $F = JSON::PP::false();

# each format's request with the agent's own function tool, and its
# server-side tools
my %anthropic = (model => 'claude-sonnet-4-5', max_tokens => 64,
    messages => [ { role => 'user', content => 'hi' } ],
    tools => [ { name => 'bash', description => 'run',
                 input_schema => { type => 'object', properties => { command => { type => 'string' } } } } ]);
my %responses = (model => 'gpt-5', input => [ { role => 'user', content => [ { type => 'input_text', text => 'hi' } ] } ],
    tools => [ { type => 'function', name => 'bash', parameters => { type => 'object' } } ]);
my %chat = (model => 'qwen3-coder', messages => [ { role => 'user', content => 'hi' } ],
    tools => [ { type => 'function', function => { name => 'bash', parameters => { type => 'object' } } } ]);
my %gemini = (contents => [ { role => 'user', parts => [ { text => 'hi' } ] } ],
    tools => [ { functionDeclarations => [ { name => 'bash', parameters => { type => 'object' } } ] } ]);
my %format = (anthropic => \%anthropic, 'cf-anthropic' => \%anthropic,
              openai => \%responses, azure => \%responses, 'cf-openai' => \%responses,
              compat => \%chat, google => \%gemini, 'cf-google' => \%gemini);

# what each format must refuse: [what, the body's change, the tool named]
my @anthropic_bad = (
    map({ my $ty = $_; [ "tool $ty", sub { push @{ $_[0]{tools} }, { type => $ty, name => 'x' } },
                         qr/\Q$ty\E/ ] }
        qw(web_search_20250305 web_fetch_20250910 code_execution_20250522
           code_execution_20250825 web_search_20260101 bash_20250124)),
    [ 'mcp_servers', sub { $_[0]{mcp_servers} = [ { type => 'url', url => 'https://mcp.example/sse', name => 'x' } ] },
      qr/mcp_servers/ ],
    [ 'container', sub { $_[0]{container} = 'container_1' }, qr/container/ ],
    [ 'an image by URL', sub { $_[0]{messages} = [ { role => 'user', content => [
          { type => 'image', source => { type => 'url', url => 'https://x.example/a.png' } } ] } ] },
      qr/url_source/ ],
    [ 'a document by URL in a tool result', sub { $_[0]{messages} = [ { role => 'user', content => [
          { type => 'tool_result', tool_use_id => 't', content => [
            { type => 'document', source => { type => 'url', url => 'https://x.example/?q=SECRET' } } ] } ] } ] },
      qr/url_source/ ],
);
my @responses_bad = (
    map({ my $ty = $_; [ "tool $ty", sub { push @{ $_[0]{tools} }, { type => $ty } }, qr/\Q$ty\E/ ] }
        qw(web_search web_search_preview web_search_preview_2025_03_11 mcp code_interpreter
           file_search image_generation computer_use_preview local_shell)),
    [ 'a stored prompt', sub { $_[0]{prompt} = { id => 'pmpt_1' } }, qr/prompt/ ],
    [ 'an image by URL', sub { $_[0]{input}[0]{content}[1] =
          { type => 'input_image', image_url => 'https://x.example/a.png' } }, qr/image_url/ ],
    [ 'a file by URL', sub { $_[0]{input}[0]{content}[1] =
          { type => 'input_file', file_url => 'https://x.example/a.pdf' } }, qr/file_url/ ],
);
my @chat_bad = (
    [ 'web_search_options', sub { $_[0]{web_search_options} = {} }, qr/web_search_options/ ],
    [ 'plugins (web search on OpenRouter)', sub { $_[0]{plugins} = [ { id => 'web' } ] },
      qr/plugins/ ],
    [ 'tool web_search', sub { push @{ $_[0]{tools} }, { type => 'web_search' } }, qr/web_search/ ],
    [ 'an image by URL', sub { $_[0]{messages}[0]{content} = [ { type => 'image_url',
          image_url => { url => 'https://x.example/a.png' } } ] }, qr/image_url/ ],
);
my @gemini_bad = (
    map({ my $k = $_; [ "tool $k", sub { push @{ $_[0]{tools} }, { $k => {} } }, qr/\Q$k\E/ ] }
        qw(google_search googleSearch url_context urlContext code_execution codeExecution
           google_search_retrieval googleSearchRetrieval)),
    [ 'a second member beside functionDeclarations', sub { $_[0]{tools}[0]{googleSearch} = {} },
      qr/googleSearch/ ],
    [ 'a file by URI', sub { push @{ $_[0]{contents}[0]{parts} },
          { fileData => { mimeType => 'text/html', fileUri => 'https://x.example/' } } }, qr/file_data/ ],
);
my %bad = (anthropic => \@anthropic_bad, 'cf-anthropic' => \@anthropic_bad,
           openai => \@responses_bad, azure => \@responses_bad, 'cf-openai' => \@responses_bad,
           compat => \@chat_bad, google => \@gemini_bad, 'cf-google' => \@gemini_bad);

sub copy { return json_decode(json_encode($_[0])) }

###############################################################################
# every route: the agent's own tools pass, streaming and not; the
# provider's are refused, naming the tool and the setting, and never
# reach it

for my $r (sort keys %route) {
    for my $stream ($T, $F) {
        my $b = copy($format{$r});
        $b->{stream} = $stream unless $r =~ /google/;
        my $x = post($r, $b);
        is($x->{status}, 200, "$r: the agent's function tools pass (stream "
           . ($stream ? 'on' : 'off') . ')') or diag($x->{body});
    }
    my $setting = $r =~ /^cf-/ ? 'CLOUDFLARE' : uc $r;
    for my $case (@{ $bad{$r} }) {
        my ($what, $change, $named) = @$case;
        for my $stream ($T, $F) {
            my $b = copy($format{$r});
            $b->{stream} = $stream unless $r =~ /google/;
            $change->($b);
            my $before = seen($r);
            my $x = post($r, $b);
            my $name = "$r: $what (stream " . ($stream ? 'on' : 'off') . ')';
            egress_error_ok($x, 403, $name, type => 'permission_error',
                            message => qr/server-side tool .*$named.*sandbox_mcp_egress_server_tools.*SMCP_${setting}_SERVER_TOOLS/);
            is(seen($r), $before, "... $name never reached the provider");
        }
    }
}

###############################################################################
# hostile JSON: what the provider would read as a server tool, we do too;
# what we cannot read as it would, we refuse

{
    my $base = json_encode(\%anthropic);
    my $tool = '{"type":"web_search_20250305","name":"web_search"}';
    (my $with = $base) =~ s/"tools":\[/"tools":[$tool,/;
    my @cases = (
        [ 'escapes in the key', $with =~ s/"type":"web/"t\\u0079pe":"web/r, 403 ],
        [ 'escapes in the value', $with =~ s/"web_search_2/"web\\u005fsearch_2/r, 403 ],
        [ 'escaped "tools"', $with =~ s/"tools"/"\\u0074ools"/r, 403 ],
        [ 'a custom type, then a server one (duplicate keys)',
          $base =~ s/"tools":\[/"tools":[{"type":"custom","name":"x","type":"web_fetch_20250910"},/r, 403 ],
        [ 'a server tool, then tools again (duplicate keys)',
          $base =~ s/\}$/,"tools":[{"type":"web_search_20250305","name":"w"}],"tools":[]}/r, 403 ],
        [ 'a type that is not a string', $base =~ s/"tools":\[/"tools":[{"type":["custom"],"name":"x"},/r, 400 ],
        [ 'nesting 200 deep', $base =~ s/\}$/,"x":${\('[' x 200)}${\(']' x 200)}}/r, 400 ],
        [ 'a BOM', "\xef\xbb\xbf$base", 400 ],
        [ 'invalid UTF-8', $base =~ s/"hi"/"h\xc0\xafi"/r, 400 ],
        [ 'a lone surrogate', $base =~ s/"hi"/"\\ud800"/r, 400 ],
        [ 'text after the object', "$base $tool", 400 ],
        [ 'two objects', "$base$base", 400 ],
        [ 'NaN', $base =~ s/"max_tokens":64/"max_tokens":NaN/r, 400 ],
        [ 'a trailing comma', $base =~ s/\}$/,}/r, 400 ],
        [ 'not an object', "[$base]", 400 ],
        [ 'an empty body', '', 400 ],
        [ 'UTF-16', join('', map { "$_\0" } split //, $with), 400 ],
    );
    for my $c (@cases) {
        my ($what, $body, $status) = @$c;
        my $before = seen('anthropic');
        my $x = post('anthropic', $body);
        egress_error_ok($x, $status, "hostile: $what",
                        type => $status == 403 ? 'permission_error' : 'invalid_request_error');
        is(seen('anthropic'), $before, "... $what never reached the provider");
    }
    like(post('anthropic', $with =~ s/"type":"web/"t\\u0079pe":"web/r)->{body},
         qr/web_search_20250305 \(tools\[0\]\.type\)/, 'the refusal says where the tool is');
    is(post('anthropic', $base =~ s/"hi"/"h\\u00e9 \\ud83d\\ude00 \\u0000"/r)->{status}, 200,
       'escapes of every kind in a value pass');

    for my $enc ('gzip', 'deflate', 'br', 'identity, gzip') {
        my $before = seen('anthropic');
        egress_error_ok(post('anthropic', $with, headers => [ 'Content-Encoding' => $enc ]), 415,
                        "Content-Encoding: $enc", message => qr/Content-Encoding/);
        is(seen('anthropic'), $before, '... never reached the provider');
    }
    is(post('anthropic', $base, headers => [ 'Content-Encoding' => 'identity' ])->{status}, 200,
       'Content-Encoding: identity passes');
    for my $ct ('text/plain', 'application/x-www-form-urlencoded', 'application/jsonx') {
        egress_error_ok(post('anthropic', $base, type => $ct), 415, "Content-Type: $ct");
    }
    is(post('anthropic', $base, type => 'application/json; charset=utf-8')->{status}, 200,
       'application/json; charset=utf-8 passes');

    # 4 MB: nginx keeps it in its temporary file; the tool at the end
    my $big = copy(\%anthropic);
    $big->{messages}[0]{content} = 'x' x (4 << 20);
    my $bigj = json_encode($big);
    is(post('anthropic', $bigj)->{status}, 200, 'a 4 MB body passes');
    (my $bigbad = $bigj) =~ s/\}$/,"mcp_servers":[]}/;
    my $before = seen('anthropic');
    egress_error_ok(post('anthropic', $bigbad), 403, 'a 4 MB body with mcp_servers at its end',
                    message => qr/mcp_servers/);
    is(seen('anthropic'), $before, '... never reached the provider');
    (my $cut = $bigj) =~ s/\}\]\}$//;
    egress_error_ok(post('anthropic', $cut), 400, 'a 4 MB body that does not end');
}

###############################################################################
# allowed per route (SMCP_<ROUTE>_SERVER_TOOLS): those and no others

{
    my %o = (port => $aport);
    for my $ty ('web_search_20250305', 'web_fetch_20250910') {
        my $b = copy(\%anthropic);
        push @{ $b->{tools} }, { type => $ty, name => 'x' };
        is(post('anthropic', $b, %o)->{status}, 200, "allowed: anthropic $ty");
    }
    my $b = copy(\%anthropic);
    push @{ $b->{tools} }, { type => 'code_execution_20250522', name => 'x' };
    egress_error_ok(post('anthropic', $b, %o), 403, 'allowed: anthropic code_execution is not',
                    message => qr/code_execution/);
    for my $k ('google_search', 'googleSearch') {
        my $g = copy(\%gemini);
        push @{ $g->{tools} }, { $k => {} };
        is(post('google', $g, %o)->{status}, 200, "allowed: google $k");
    }
    my $g = copy(\%gemini);
    push @{ $g->{tools} }, { urlContext => {} };
    egress_error_ok(post('google', $g, %o), 403, 'allowed: google urlContext is not');
    my $r = copy(\%responses);
    push @{ $r->{tools} }, { type => 'web_search' }, { type => 'mcp', server_url => 'https://x' };
    is(post('openai', $r, %o)->{status}, 200, 'allowed: openai all');
    my $c = copy(\%chat);
    $c->{web_search_options} = {};
    egress_error_ok(post('compat', $c, %o), 403, 'allowed: compat none (not set)');
}

###############################################################################
# the audit records the refusal

{
    wait_until(10, sub { grep { $_->{json}{status} == 403 } $t->run_events($run, type => 'egress') });
    my @r = grep { $_->{json}{status} == 403 } $t->run_events($run, type => 'egress');
    ok(@r && !grep({ $_->{json}{granted} } @r), 'audit: refusals recorded, not granted');
    my $logs = $t->read_file('error.log') . $t->read_file('access.log');
    unlike($logs, qr/\Q$tok\E|REAL-/, 'logs: no token, no key');
}

$_->stop for values %fake;
$t->done;
