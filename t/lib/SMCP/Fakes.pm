package SMCP::Fakes;

# Scripted fake upstreams for the egress-proxy tests, core Perl only.
#
# Each fake is a small HTTP/1.1 server forked from the test process, bound
# to 127.0.0.1:<free port> (bound before the fork: it accepts at once, no
# readiness wait needed), one forked child per connection (keep-alive,
# Content-Length and chunked request bodies, Expect: 100-continue;
# responses use Content-Length, or chunked when streaming; HTTP/1.0 gets
# close-delimited).  Every request is appended as one JSON line to
# $f->log_file before its response is sent.  Fakes are stopped by PID
# ($f->stop, or END for whatever the test left running); a fake whose test
# process died (even by SIGKILL) exits within 0.25 s by itself.
#
#   use lib 't/lib';
#   use SMCP::Fakes qw(parse_sse);
#
# START FUNCTIONS (each returns an object; dies if it cannot listen)
#   SMCP::Fakes::start_anthropic(%o)   POST /v1/messages (+ /count_tokens)
#   SMCP::Fakes::start_openai(%o)      POST /v1/chat/completions (and
#                                      /chat/completions), POST /v1/responses
#                                      (and /responses), GET /v1/models
#   SMCP::Fakes::start_azure(%o)       Azure OpenAI: POST /openai/v1/{responses,
#                                      chat/completions} (api-version optional:
#                                      v1|preview|latest), POST /openai/
#                                      deployments/D/{responses,chat/completions}
#                                      and /openai/responses (api-version
#                                      required, else 404 Resource not found);
#                                      key in header api-key; log fields
#                                      deployment, api_version
#   SMCP::Fakes::start_gemini(%o)      Google Gemini: POST /v1beta/models/M:
#                                      {streamGenerateContent,generateContent,
#                                      countTokens} (and /v1/); key in
#                                      x-goog-api-key or ?key= (missing 403
#                                      PERMISSION_DENIED, wrong 400
#                                      API_KEY_INVALID); log field sse
#   SMCP::Fakes::start_cloudflare(%o)  Cloudflare AI Gateway: /v1/ACCOUNT/
#                                      GATEWAY/VENDOR/...: anthropic/v1/messages
#                                      (+ /count_tokens), openai/{responses,
#                                      chat/completions}, compat/chat/completions,
#                                      workers-ai/v1/chat/completions,
#                                      google-ai-studio/v1beta/models/M:...,
#                                      azure-openai/R/D/chat/completions, each
#                                      answered by the fake of that protocol
#                                      (same script, counters and log; vendor
#                                      keys not checked); options account,
#                                      gateway, token (cf-aig-authorization:
#                                      Bearer TOKEN, else 401 code 2009); log
#                                      fields provider, provider_path;
#                                      ->base_url is url/v1/ACCOUNT/GATEWAY
#   SMCP::Fakes::start_github(%o)      git smart HTTP + REST on one port
#   SMCP::Fakes::start_github_git(%o)  git smart HTTP only
#   SMCP::Fakes::start_github_api(%o)  REST only
#   SMCP::Fakes::start_static(%o)      files for GET and HEAD (see STATIC)
#   All answer GET/HEAD / with 200 "ok" (readiness).
#
# COMMON OPTIONS
#   addr => '127.0.0.1'   listen address (e.g. a docker bridge gateway)
#   port => 0             fixed port (default: a free one from the kernel)
#   dir  => path          state dir (default: a temp dir removed at END,
#                         kept with SMCP_TEST_KEEP=1)
#   idle_timeout => 30    seconds a keep-alive connection may idle
#
# COMMON METHODS
#   ->pid ->port ->addr ->host ("addr:port") ->url ("http://addr:port")
#   ->dir ->log_file ->kind ->running ->stop (TERM, 5 s, KILL; idempotent)
#   ->requests(path => '/x' | qr/../, method => 'POST')
#       list (array ref in scalar context) of logged requests, oldest first:
#       { time (received, epoch float), logged, pid, conn (connection
#         number), seq (request number on that connection), peer, method,
#         target, path, query (undef if none), version ('1.1'),
#         headers => {lc name => value, repeats joined ", "},
#         header_list => [[name, value], ...] (as sent),
#         body_length, chunked (0|1), body (JSON/text bodies, characters),
#         json (decoded JSON body), status (the response status; 0 = the
#         connection was hung/closed without one), + per fake:
#         model fakes: turn (0-based script index, undef without a script),
#           model, stream (0|1), error (type), hang;
#         github: repo ('owner/repo'), service (git-upload-pack|...),
#           auth ('ok'|'bad'|'missing'), number (created PR) }
#   ->last_request(%filter)
#   ->wait_requests($n, %filter, timeout => 10)  true once >= $n logged
#   ->clear_requests                             truncates the log
#
# MODEL FAKES (anthropic, openai, azure, gemini; cloudflare passes its
# options on)
#   key => 'test-anthropic-key' | 'test-openai-key' | 'test-azure-key' |
#       'test-google-key'   the accepted key
#       (anthropic: header x-api-key; openai: Authorization: Bearer KEY);
#       key => undef accepts any.  A wrong/missing key gets 401 with the
#       provider's error JSON and consumes no turn:
#       anthropic {"type":"error","error":{"type":"authentication_error",
#                  "message":"invalid x-api-key"}}
#       openai {"error":{"message":"Incorrect API key provided: ...",
#               "type":"invalid_request_error","param":null,
#               "code":"invalid_api_key"}}  (code null when missing)
#   chunk_delay => 0   seconds between streamed events (not before the
#                      first; response headers go out at once)
#   script => [turns]  consumed in order, one per accepted generation
#                      request, shared across connections; the last repeats
#   scripts => { model_name => [turns] }  a separate script (and counter)
#                      for requests naming that model (e.g. OpenCode's
#                      small_model title requests); others use `script`
#   text => '...'      the answer when there is no script
#   deltas => 3        text/JSON deltas per content block
#   input_tokens => 12 usage input tokens
#   ping => 1          (anthropic) a ping event after the first block start
#   strict => 1        (anthropic) 400 unless model/max_tokens/messages
#   require_version => 1  (anthropic) 400 without anthropic-version
#   models => [ids]    (openai) GET /v1/models list
#   always_usage => 1  (openai) usage chunk even without
#                      stream_options.include_usage
#   A TURN is a hash (a plain string means {text => STRING}, a code ref is
#   called as ->($request_json, $raw_request, $index) and returns a turn):
#     text => 'chars'                 a text block (character string)
#     tool_use => {name => 'write', input => {...}, id => optional}
#                 or [ {...}, {...} ] tool_use blocks / tool_calls after
#                 the text; stop_reason tool_use / finish_reason tool_calls
#     error => {status => 429, type => 'rate_limit_error', message => '..',
#               headers => {'retry-after-ms' => 0}, code => (openai),
#               in_stream => 1 (anthropic: 200 stream, message_start then
#               an `error` event)}   status defaults from the type
#     hang => seconds   alone: log (status 0), sleep, close without a
#                       response; with text/tool_use/error: delay then answer
#     delay => seconds  this turn's chunk_delay
#     chunks => [..]    explicit text deltas
#     abort_after => N  stream: close the connection after N events
#     usage => {input_tokens, output_tokens}   stop_reason => '...'
#     headers => {...}  extra response headers
#   Streams: anthropic event: message_start, content_block_start,
#   content_block_delta (text_delta | input_json_delta, the first one
#   empty) x N, content_block_stop (per block), message_delta
#   (stop_reason, usage), message_stop; openai data: chat.completion.chunk
#   (role, content deltas, tool_calls deltas, finish_reason, usage chunk if
#   stream_options.include_usage) then data: [DONE]; openai /v1/responses
#   (stream: true): event: response.created, response.in_progress, per
#   output item response.output_item.added, (text) content_part.added,
#   output_text.delta x N, output_text.done, content_part.done, (tool)
#   function_call_arguments.delta x N, function_call_arguments.done, then
#   response.output_item.done; response.completed (usage); without stream
#   the response object.  gemini: with alt=sse data: {candidates:[{content:
#   {parts:[{text}|{functionCall:{name,args}}],role:model}}]} per text
#   piece / call, the last with finishReason STOP and usageMetadata;
#   without alt=sse the same chunks as one JSON array; generateContent one
#   response.  Error turns: gemini's type is the status name
#   (RESOURCE_EXHAUSTED, ...), azure's and openai's as openai.
#   Methods: ->key ->base_url (url . '/v1', for OpenCode's baseURL)
#     ->set_script(\@turns) / ->set_script(\@turns, model => 'm')
#       replace a script at run time (JSON-able turns only) and reset the
#       counters; ->set_script(undef) back to the start() script
#     ->reset_turns  restart every script from its first turn
#
# GITHUB
#   token => 'test-github-token'  (git_token / api_token override per side)
#   user => 'x-access-token'      the Basic user git must send (undef: any)
#   root => dir                   bare repositories as root/owner/repo.git
#                                 (default dir/repos)
#   git => $github_git_fake       (REST) share that fake's root
#   repos => ['o/r'] | {'o/r' => {default_branch => 'dev', private => 1}}
#                                 (REST) repositories known without a bare
#                                 repo; bare repos under root are known too
#   anonymous_read => 1           clone/fetch without credentials
#   login => 'smcp-bot'  web_base => 'https://github.com'
#   api_base => 'https://api.github.com'  clone_base => web_base
#   default_branch => 'main'
#   git: /<owner>/<repo>.git/(info/refs|git-upload-pack|git-receive-pack)
#     (the .git suffix may be left out) run through the real
#     `git http-backend` (GIT_PROJECT_ROOT, GIT_HTTP_EXPORT_ALL, REMOTE_USER,
#     HTTP_GIT_PROTOCOL, ...); needs Authorization: Basic
#     base64(x-access-token:TOKEN), else 401 + WWW-Authenticate: Basic
#     realm="GitHub"; unknown repo 404.
#   REST (Authorization: Bearer TOKEN or token TOKEN, else 401
#     {"message":"Bad credentials",...}; unknown repo 404 {"message":
#     "Not Found",...}; /api/v3 prefix accepted):
#     GET /repos/{o}/{r}          repo JSON (full_name, default_branch,
#                                 html_url, clone_url, owner, permissions..)
#     POST /repos/{o}/{r}/pulls   {title, head ('branch'|'owner:branch'),
#                                 base, body, draft} -> 201 {number, html_url,
#                                 state "open", head{ref,sha,label},
#                                 base{..}, ...} + Location; 422 Validation
#                                 Failed for missing fields, unknown head/base
#                                 branches (checked when a bare repo exists),
#                                 no commits between, or a duplicate open PR
#     GET /repos/{o}/{r}/pulls[?state=open|closed|all&head=o:b&base=b]
#     GET /repos/{o}/{r}/pulls/{n}   GET /user   GET /rate_limit
#   Methods (run git in the test process):
#     ->root ->token ->repo_path('o/r') ->clone_url('o/r')
#     ->auth_header($token?, $user?)  "Authorization: Basic ..."
#     ->git_auth_args($token?, $user?)
#         ('-c', 'http.extraHeader=Authorization: Basic ...')
#     ->create_repo('o/r', files => {path => content}, branch => 'main',
#         message => 'Initial commit', empty => 1) -> commit sha; bare repo
#         with http.receivepack true
#     ->commit_files('o/r', branch => 'main', files => {path => content|undef
#         (delete)}, message => .., from => 'main', orphan => 1) -> sha
#     ->ref_commit('o/r', 'main'|'refs/...') -> sha|undef
#     ->file_content('o/r', $ref, 'path') -> bytes|undef
#     ->commit_message('o/r', $ref)  ->files('o/r', $ref)  ->refs('o/r')
#     ->add_repo('o/r', %attrs)  ->pulls('o/r') -> created PRs
#     ->api_fault(METHOD, qr/PATH/ as a string, status => 502, body =>
#         BYTES, content_type => ..): REST requests matching (after the
#         token check, /api/v3 stripped) get that answer instead;
#         ->api_fault() clears them; apply => 1: the request takes
#         effect all the same (a pull request opened), only its answer is
#         that one (an answer lost on the way); hang => SECONDS (with
#         apply): that answer only after so long; delay => SECONDS: the
#         request handled as usual, only so much later (a slow GitHub);
#         ->delayed -> "METHOD PATH" of each delayed request, as it came
#     ->reject_pushes('o/r', MESSAGE): a pre-receive hook refuses every
#         push with MESSAGE; ->reject_pushes('o/r') allows them again
#
# GITHUB OAUTH (start_github_oauth): GitHub as an OAuth provider (the web
# flow an OAuth app sees), scripted
#   client_id => 'gh-client'  client_secret => 'gh-secret'
#   login => 'octo-alice'     who "approves" at the authorize page
#   orgs => {login => ['acme', ...]}   organizations of each login
#   ids => {login => id}      a user's numeric id (default: a number made
#                             from the login, the same every time); a
#                             token belongs to the id, so a renamed user's
#                             token answers the new login
#   org_ids => {org => id}    an organization's id (default likewise)
#   GET /login/oauth/authorize?client_id&redirect_uri&state[&scope]
#       -> 302 redirect_uri?code=..&state=.. (the user approved), or with
#       deny => 1 (->set(deny => 1)): ?error=access_denied&state=..;
#       unknown client_id: 404
#   POST /login/oauth/access_token (parameters in the query or a form body;
#       Accept: application/json else form-encoded answer, as GitHub) ->
#       {access_token, token_type bearer, scope}; a wrong client or secret
#       {error: incorrect_client_credentials}; an unknown, used or other
#       redirect_uri's code {error: bad_verification_code} (200, as GitHub)
#   GET /user (Bearer gho_...) -> {login, id} (the id's login now; a user
#       with no login any more: 401); GET /user/orgs -> [{login, id}];
#       a bad token 401 Bad credentials; fail => 1: both 503
#   Methods: ->set(login => 'x', deny => 0, orgs => {...}, ids => {...},
#   fail => 0)  ->rename(OLD, NEW): the user of login OLD (its id and
#   organizations) is NEW from now on  ->id(LOGIN)  ->requests
#
# STATIC (start_static): files over HTTP, scripted or from a directory
#   files => {'/path' => BODY | [STATUS, BODY, CONTENT_TYPE]}
#   GET /path -> the file (application/json by default), else:
#   root => DIR   DIR/a/b at /a/b (a directory's index.html, else its
#                 index.json, at /a and /a/): a stand-in package registry
#                 (PyPI simple index, Go module proxy, npm packuments);
#                 the type by extension (html, json, whl, tgz, zip, mod,
#                 info, ...; types => {ext => type} adds more)
#   headers => [name => value, ...]   on every answer
#   else 404; methods other than GET and HEAD: 405
#   Methods: ->set_file('/path', BODY | [STATUS, BODY, TYPE] | undef)
#
# parse_sse($body) -> ({event, data, json, id}, ...)   (exportable)
# scenario_script({MARK => [steps]}, title => TEXT) -> a script step (a
#     code ref) for start_anthropic that plays one script per task
#     (exportable)
# mcp_client_script(server => 'opencode', plan => sub { ... }) -> a script
#     step for start_anthropic that plays the model of an MCP client such
#     as Claude Code, calling the server's tools as plan decides (see
#     below; exportable)
#
# t/fake/serve.pl runs one fake in the foreground for non-Perl callers.

use strict;
use warnings;

use Exporter qw(import);

our @EXPORT_OK = qw(start_anthropic start_openai start_azure start_gemini
                    start_cloudflare start_github start_github_git
                    start_github_api start_github_oauth start_static parse_sse
                    scenario_script mcp_client_script);
our %EXPORT_TAGS = (all => \@EXPORT_OK);

our @LIVE;    # fakes started by this process, for END cleanup

sub start_anthropic  { return SMCP::Fakes::Anthropic->_start(@_) }
sub start_openai     { return SMCP::Fakes::OpenAI->_start(@_) }
sub start_azure      { return SMCP::Fakes::Azure->_start(@_) }
sub start_gemini     { return SMCP::Fakes::Gemini->_start(@_) }
sub start_cloudflare { return SMCP::Fakes::Cloudflare->_start(@_) }
sub start_github     { return SMCP::Fakes::GitHub->_start(kind => 'github', serve_git => 1, serve_api => 1, @_) }
sub start_github_git { return SMCP::Fakes::GitHub->_start(kind => 'github-git', serve_git => 1, serve_api => 0, @_) }
sub start_github_api { return SMCP::Fakes::GitHub->_start(kind => 'github-api', serve_git => 0, serve_api => 1, @_) }
sub start_github_oauth { return SMCP::Fakes::GitHubOAuth->_start(@_) }
sub start_static { return SMCP::Fakes::Static->_start(@_) }

# parse_sse($body) -> list of {event => name|undef, data => string,
# json => decoded data|undef, id => ...}; tolerant of \r\n and \n
sub parse_sse {
    my ($body) = @_;
    my @ev;
    for my $block (split /\r?\n\r?\n/, $body // '') {
        my %e;
        my @data;
        for my $l (split /\r?\n/, $block) {
            next if $l =~ /^:/;
            my ($k, $v) = $l =~ /^([^:]+):? ?(.*)$/ or next;
            if ($k eq 'data') { push @data, $v }
            else { $e{$k} = $v }
        }
        next unless @data || exists $e{event};
        $e{data} = join("\n", @data);
        $e{json} = eval { $SMCP::Fakes::Server::JSON->decode($e{data}) }
            if length $e{data} && $e{data} ne '[DONE]';
        push @ev, \%e;
    }
    return @ev;
}

# scenario_script({'SCENARIO-X' => [steps]}, title => TEXT) -> a code ref,
# the one step of start_anthropic(script => [...]) that plays a script per
# task.  The script is picked by the marker (SCENARIO-[A-Z0-9]+) in the
# latest user text of the conversation, the step by the number of
# assistant messages after that user message: a continued session (whose
# conversation holds earlier runs) and a retried request land on the same
# step.  A step is a turn (text, tool_use, error, hang, ...), or a code ref
# called with (request JSON, step number).  OpenCode's title generator is
# answered TEXT (default "Test run").
sub scenario_script {
    my ($scripts, %o) = @_;
    my $title = $o{title} // 'Test run';
    return sub {
        my ($j) = @_;
        my $sys = $SMCP::Fakes::Server::JSON_CHARS->encode($j->{system} // '');
        return { text => $title } if $sys =~ /title generator/i;
        my $msgs = $j->{messages} || [];
        my ($mark, $at);
        for my $i (reverse 0 .. $#$msgs) {
            my $m = $msgs->[$i];
            next unless ($m->{role} // '') eq 'user';
            my $c = $m->{content};
            my $text = ref $c eq 'ARRAY'
                ? join("\n", map { ($_->{type} // '') eq 'text' ? ($_->{text} // '') : () } @$c)
                : ($c // '');
            if ($text =~ /\b(SCENARIO-[A-Z0-9]+)/) { ($mark, $at) = ($1, $i); last }
        }
        my $steps = defined $mark ? $scripts->{$mark} : undef;
        return { text => 'no scenario in the conversation' } unless $steps;
        my $n = grep { ($_->{role} // '') eq 'assistant' } @{$msgs}[$at + 1 .. $#$msgs];
        my $step = $steps->[$n < $#$steps ? $n : $#$steps];
        $step = $step->($j, $n) if ref $step eq 'CODE';
        return $step;
    };
}

# mcp_client_script(server => NAME, plan => CODE) -> a code ref, the one
# step of start_anthropic(script => [...]) that plays the model behind an
# MCP client (Claude Code: its tools named mcp__NAME__TOOL).  plan is
# called with the MCP calls made so far in the conversation, oldest first,
# each {tool (without the prefix), input, text (the result's text), json
# (that text decoded, when it is JSON), error (1: is_error)}, in an array,
# and the request (decoded: its messages hold the prompt), and returns
# the next call {tool => 'opencode_get_result', input => {...}} or the
# answer {text => '...'}.  Both forms a client offers its MCP tools in
# are handled: listed in `tools` (called at once), or deferred (named in
# the system prompt, with a ToolSearch tool that loads them: the step
# calls ToolSearch with "select:mcp__NAME__TOOL" first, as the real model
# does).  A request with no tools (a title or a summary) gets a short
# text.
sub mcp_client_script {
    my (%o) = @_;
    my $prefix = "mcp__$o{server}__";
    my $plan = $o{plan};
    return sub {
        my ($j) = @_;
        my %offered = map { ($_->{name} // '') => 1 } @{ $j->{tools} || [] };
        return { text => 'A fake title' } unless %offered;
        my (%use, @calls);
        for my $m (@{ $j->{messages} || [] }) {
            next unless ref $m->{content} eq 'ARRAY';
            for my $b (@{ $m->{content} }) {
                my $type = $b->{type} // '';
                if ($type eq 'tool_use') {
                    $use{ $b->{id} // '' } = $b;
                    next;
                }
                next unless $type eq 'tool_result';
                my $u = $use{ $b->{tool_use_id} // '' } or next;
                my ($tool) = ($u->{name} // '') =~ /^\Q$prefix\E(.+)$/ or next;
                my $c = $b->{content};
                my $text = ref $c eq 'ARRAY'
                    ? join('', map { ($_->{type} // '') eq 'text' ? ($_->{text} // '') : () } @$c)
                    : ($c // '');
                push @calls, { tool => $tool, input => $u->{input}, text => $text,
                               json => scalar eval { $SMCP::Fakes::Server::JSON_CHARS->decode($text) },
                               error => $b->{is_error} ? 1 : 0 };
            }
        }
        my $next = $plan->(\@calls, $j);
        return $next unless defined $next->{tool};
        my $name = $prefix . $next->{tool};
        return { tool_use => { name => $name, input => $next->{input} // {} } }
            if $offered{$name};
        return { tool_use => { name => 'ToolSearch',
                               input => { query => "select:$name", max_results => 5 } } }
            if $offered{ToolSearch};
        return { text => "the client offers no tool $name" };
    };
}

END {
    my $status = $?;
    for my $f (@LIVE) {
        next unless $f->{owner_pid} && $f->{owner_pid} == $$;
        eval { $f->stop };
        eval { $f->_remove_dir };
    }
    $? = $status;
}

##############################################################################
# the HTTP server core

package SMCP::Fakes::Server;

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use Errno qw(EINTR EAGAIN);
use Fcntl qw(:flock O_RDWR O_CREAT);
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

# output keys in a stable order with the discriminators first, as the real
# APIs send them ({"type":"message_start","message":{...}})
my %KEY_RANK = (type => 0, id => 1, object => 2);
sub _key_order {
    my ($x, $y) = ($JSON::PP::a, $JSON::PP::b);
    return ($KEY_RANK{$x} // 9) <=> ($KEY_RANK{$y} // 9) || $x cmp $y;
}
our $JSON = JSON::PP->new->allow_nonref(1)->utf8(1)->sort_by(\&_key_order);
our $JSON_CHARS = JSON::PP->new->canonical(1)->allow_nonref(1);

my %REASON = (
    100 => 'Continue', 200 => 'OK', 201 => 'Created', 204 => 'No Content',
    301 => 'Moved Permanently', 302 => 'Found', 304 => 'Not Modified',
    400 => 'Bad Request', 401 => 'Unauthorized', 403 => 'Forbidden',
    404 => 'Not Found', 405 => 'Method Not Allowed', 408 => 'Request Timeout',
    409 => 'Conflict', 413 => 'Payload Too Large', 422 => 'Unprocessable Entity',
    429 => 'Too Many Requests', 431 => 'Request Header Fields Too Large',
    500 => 'Internal Server Error',
    502 => 'Bad Gateway', 503 => 'Service Unavailable',
    504 => 'Gateway Timeout', 529 => 'Overloaded',
);

sub _defaults { return () }
sub _init { }

sub _start {
    my ($class, %o) = @_;
    my $self = bless { $class->_defaults, %o }, $class;
    $self->{kind} //= lc((split /::/, $class)[-1]);
    $self->{addr} //= '127.0.0.1';
    $self->{idle_timeout} //= 30;
    $self->{keep} = $ENV{SMCP_TEST_KEEP} ? 1 : 0;
    if ($self->{dir}) {
        make_path($self->{dir});
    } else {
        $self->{dir} = tempdir("smcp-fake-$self->{kind}-XXXXXX", TMPDIR => 1,
                               CLEANUP => 0);
        $self->{own_dir} = 1;
    }
    $self->{log_file} //= "$self->{dir}/requests.log";
    open(my $lf, '>>', $self->{log_file}) or die "SMCP::Fakes: $self->{log_file}: $!\n";
    close $lf;
    $self->_init;

    my $ls = IO::Socket::INET->new(
        LocalAddr => $self->{addr}, LocalPort => $self->{port} // 0,
        Proto => 'tcp', Listen => 128, ReuseAddr => 1,
    ) or die "SMCP::Fakes: cannot listen on $self->{addr}:"
             . ($self->{port} // 0) . ": $!\n";
    $self->{port} = $ls->sockport;
    $self->{owner_pid} = $$;

    my $pid = fork();
    die "SMCP::Fakes: fork: $!\n" unless defined $pid;
    if ($pid == 0) {
        my $ok = eval { $self->_server_main($ls); 1 };
        print STDERR "server: $@" unless $ok;
        POSIX::_exit($ok ? 0 : 1);
    }
    close $ls;
    $self->{pid} = $pid;
    push @SMCP::Fakes::LIVE, $self;
    Test::More::diag("fake $self->{kind}: $self->{dir}")
        if $self->{keep} && $INC{'Test/More.pm'};
    return $self;
}

# accessors
sub pid      { $_[0]{pid} }
sub port     { $_[0]{port} }
sub addr     { $_[0]{addr} }
sub host     { "$_[0]{addr}:$_[0]{port}" }
sub url      { "http://$_[0]{addr}:$_[0]{port}" }
# the model APIs': the key they accept, the base URL an SDK is given
sub key      { $_[0]{key} }
sub base_url { $_[0]->url . '/v1' }
sub dir      { $_[0]{dir} }
sub log_file { $_[0]{log_file} }
sub kind     { $_[0]{kind} }

sub running {
    my ($self) = @_;
    return 0 unless $self->{pid};
    my $r = waitpid($self->{pid}, WNOHANG);
    if ($r == $self->{pid} || $r == -1) { delete $self->{pid}; return 0 }
    return 1;
}

# stop(): TERM the server (it TERMs its connection children), wait, KILL
sub stop {
    my ($self) = @_;
    return unless $self->{owner_pid} && $self->{owner_pid} == $$;
    my $pid = delete $self->{pid} or return;
    kill 'TERM', $pid;
    my $deadline = time() + 5;
    while (time() < $deadline) {
        my $r = waitpid($pid, WNOHANG);
        return $? if $r == $pid || $r == -1;
        sleep(0.02);
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
    return $?;
}

sub _remove_dir {
    my ($self) = @_;
    return if $self->{keep} || !$self->{own_dir} || !$self->{dir};
    remove_tree($self->{dir}) if -d $self->{dir};
}

# requests(%filter) -> list (array ref in scalar context) of logged requests
#   filter: path => '/v1/messages' | qr/.../, method => 'POST'
# each: {time, conn, seq, pid, method, target, path, query, version,
#        headers => {lc name => value}, header_list => [[name, value]...],
#        body_length, body (JSON/text bodies, as characters), json (decoded
#        JSON body), status (response status; 0 = none), + per-fake fields}
sub requests {
    my ($self, %f) = @_;
    my @r;
    if (open(my $fh, '<', $self->{log_file})) {
        flock($fh, LOCK_SH);
        while (my $l = <$fh>) {
            my $e = eval { $JSON->decode($l) } or next;
            push @r, $e;
        }
        close $fh;
    }
    @r = grep { _match($_->{path}, $f{path}) } @r if defined $f{path};
    @r = grep { $_->{method} eq $f{method} } @r if defined $f{method};
    return wantarray ? @r : \@r;
}

sub _match {
    my ($v, $want) = @_;
    return 0 unless defined $v;
    return ref $want eq 'Regexp' ? $v =~ $want : $v eq $want;
}

sub last_request {
    my ($self, %f) = @_;
    my @r = $self->requests(%f);
    return $r[-1];
}

# wait_requests($n, %filter, timeout => 10) -> true when >= $n logged
sub wait_requests {
    my ($self, $n, %f) = @_;
    my $timeout = delete $f{timeout} // 10;
    my $deadline = time() + $timeout;
    while (1) {
        my @r = $self->requests(%f);
        return scalar @r if @r >= $n;
        return 0 if time() >= $deadline;
        sleep(0.05);
    }
}

sub clear_requests {
    my ($self) = @_;
    open(my $fh, '+<', $self->{log_file}) or return;
    flock($fh, LOCK_EX);
    truncate($fh, 0);
    close $fh;
}

##############################################################################
# server process

sub _server_main {
    my ($self, $ls) = @_;
    $0 = "smcp-fake-$self->{kind} $self->{addr}:$self->{port}";
    open(STDIN, '<', '/dev/null');
    open(STDOUT, '>>', "$self->{dir}/server.log");
    open(STDERR, '>&', \*STDOUT);
    STDOUT->autoflush(1);
    $SIG{PIPE} = 'IGNORE';
    my $stop = 0;
    $SIG{$_} = sub { $stop = 1 } for qw(TERM INT HUP);
    $SIG{CHLD} = 'DEFAULT';
    srand($$ ^ int(time() * 1000));

    my %kids;
    my $sel = IO::Select->new($ls);
    my $owner = $self->{owner_pid};
    my $nconn = 0;
    while (!$stop) {
        while ((my $k = waitpid(-1, WNOHANG)) > 0) { delete $kids{$k} }
        last if getppid() != $owner;     # the test process went away
        my @r = $sel->can_read(0.25);
        next unless @r;
        my $c = $ls->accept or next;
        $nconn++;
        my $k = fork();
        if (!defined $k) { close $c; next }
        if ($k == 0) {
            $SIG{$_} = 'DEFAULT' for qw(TERM INT HUP);
            close $ls;
            srand($$ ^ int(time() * 1000));
            my $ok = eval { $self->_connection($c, $nconn); 1 };
            print STDERR "connection $nconn: $@" unless $ok;
            POSIX::_exit(0);
        }
        $kids{$k} = 1;
        close $c;
    }
    close $ls;
    kill 'TERM', keys %kids;
    my $deadline = time() + 3;
    while (%kids && time() < $deadline) {
        while ((my $k = waitpid(-1, WNOHANG)) > 0) { delete $kids{$k} }
        sleep(0.02) if %kids;
    }
    if (%kids) {
        kill 'KILL', keys %kids;
        waitpid($_, 0) for keys %kids;
    }
}

sub _connection {
    my ($self, $c, $cid) = @_;
    binmode $c;
    $self->{conn_sock} = $c;
    my $buf = '';
    my $seq = 0;
    while (1) {
        my $req = $self->_read_request($c, \$buf) or last;
        $req->{conn} = $cid;
        $req->{seq} = ++$seq;
        $req->{peer} = $c->peerhost;
        if ($req->{bad}) {
            $self->_reply($c, $req, $req->{bad}, ['Content-Type' => 'text/plain'],
                          "bad request\n", close => 1);
            last;
        }
        # GET / answers on every fake: it is up
        my $keep = $req->{path} eq '/' && $req->{method} =~ /^(GET|HEAD)$/
            ? $self->_reply($c, $req, 200, ['Content-Type' => 'text/plain'], "ok\n")
            : $self->_handle($req, $c);
        last unless $keep && $req->{keep_alive};
    }
    close $c;
}

sub _fill {
    my ($c, $bufref, $deadline) = @_;
    my $sel = IO::Select->new($c);
    while (1) {
        my $left = $deadline - time();
        return 0 if $left <= 0;
        next unless $sel->can_read($left);
        my $n = sysread($c, $$bufref, 65536, length $$bufref);
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            return 0;
        }
        return $n > 0 ? 1 : 0;
    }
}

sub _read_line {
    my ($c, $bufref, $deadline) = @_;
    while ((my $i = index($$bufref, "\n")) < 0) {
        return undef if length $$bufref > 65536;
        _fill($c, $bufref, $deadline) or return undef;
    }
    my $i = index($$bufref, "\n");
    my $l = substr($$bufref, 0, $i + 1, '');
    $l =~ s/\r?\n\z//;
    return $l;
}

sub _read_exact {
    my ($c, $bufref, $n, $deadline) = @_;
    while (length $$bufref < $n) {
        _fill($c, $bufref, $deadline) or return undef;
    }
    return substr($$bufref, 0, $n, '');
}

# one request from the connection: undef on EOF/idle timeout,
# {bad => status} on a malformed one
sub _read_request {
    my ($self, $c, $bufref) = @_;
    my $deadline = time() + $self->{idle_timeout};
    # skip empty lines before the request line (RFC 9112 2.2)
    my $line;
    do {
        $line = _read_line($c, $bufref, $deadline);
        return undef unless defined $line;
    } while ($line eq '');
    my $t0 = time();
    $deadline = $t0 + 60;
    my %req = (t0 => $t0, request_line => $line, header_list => [],
               headers => {}, body => '');
    if ($line !~ m{^([A-Za-z]+) (\S+) HTTP/(\d)\.(\d)$}) {
        @req{qw(method target path version bad)} = ('', $line, '', '1.0', 400);
        return \%req;
    }
    @req{qw(method target)} = ($1, $2);
    $req{version} = "$3.$4";
    my $hbytes = 0;
    while (1) {
        my $h = _read_line($c, $bufref, $deadline);
        return { %req, bad => 400, path => '' } unless defined $h;
        last if $h eq '';
        $hbytes += length $h;
        return { %req, bad => 431, path => '' } if $hbytes > 65536;
        my ($k, $v) = $h =~ /^([^:\s]+):[ \t]*(.*?)[ \t]*$/
            or return { %req, bad => 400, path => '' };
        push @{ $req{header_list} }, [$k, $v];
        my $lk = lc $k;
        $req{headers}{$lk} = exists $req{headers}{$lk}
            ? "$req{headers}{$lk}, $v" : $v;
    }
    my $target = $req{target};
    $target = $1 // '/' if $target =~ m{^[a-z]+://[^/]+(/.*)?$}i;
    my ($path, $query) = split /\?/, $target, 2;
    $req{path} = $path;
    $req{query} = $query;
    my $h = $req{headers};
    my $conn = lc($h->{connection} // '');
    $req{keep_alive} = $req{version} eq '1.1' ? ($conn !~ /\bclose\b/) : 0;

    my $chunked = ($h->{'transfer-encoding'} // '') =~ /chunked/i;
    my $cl = $h->{'content-length'};
    if (defined $cl && $cl !~ /^\d+$/ && !$chunked) {
        return { %req, bad => 400 };
    }
    my $has_body = $chunked || ($cl && $cl > 0);
    if ($has_body && ($h->{expect} // '') =~ /100-continue/i
        && $req{version} eq '1.1') {
        _send_all($c, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    if ($chunked) {
        my $body = '';
        while (1) {
            my $sz = _read_line($c, $bufref, $deadline);
            return { %req, bad => 400 } unless defined $sz;
            $sz =~ s/;.*//;
            $sz =~ s/\s+//g;
            return { %req, bad => 400 } unless $sz =~ /^[0-9a-fA-F]+$/;
            my $n = hex $sz;
            if ($n == 0) {
                # trailer section up to the empty line
                while (1) {
                    my $t = _read_line($c, $bufref, $deadline);
                    return { %req, bad => 400 } unless defined $t;
                    last if $t eq '';
                }
                last;
            }
            my $data = _read_exact($c, $bufref, $n, $deadline);
            return { %req, bad => 400 } unless defined $data;
            $body .= $data;
            my $crlf = _read_line($c, $bufref, $deadline);
            return { %req, bad => 400 } unless defined $crlf && $crlf eq '';
        }
        $req{body} = $body;
        $req{chunked} = 1;
    } elsif ($cl) {
        my $data = _read_exact($c, $bufref, $cl, $deadline);
        return { %req, bad => 400 } unless defined $data;
        $req{body} = $data;
    }

    my $ct = $h->{'content-type'} // '';
    if (length $req{body} && ($ct =~ /json/i || $req{body} =~ /^\s*[\{\[]/)) {
        $req{json} = eval { $JSON->decode($req{body}) };
    }
    return \%req;
}

sub _send_all {
    my ($c, $data) = @_;
    my $off = 0;
    while ($off < length $data) {
        my $n = syswrite($c, $data, length($data) - $off, $off);
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            return 0;
        }
        $off += $n;
    }
    return 1;
}

sub _http_date {
    return POSIX::strftime('%a, %d %b %Y %H:%M:%S GMT', gmtime());
}

# the log line of one request; %x adds/overrides fields
sub _log {
    my ($self, $req, %x) = @_;
    return if $req->{logged}++;
    my %e = (
        time        => $req->{t0},
        logged      => time(),
        pid         => $$,
        conn        => $req->{conn},
        seq         => $req->{seq},
        peer        => $req->{peer},
        method      => $req->{method},
        target      => $req->{target},
        path        => $req->{path},
        query       => $req->{query},
        version     => $req->{version},
        headers     => $req->{headers},
        header_list => $req->{header_list},
        body_length => length($req->{body} // ''),
        chunked     => $req->{chunked} ? 1 : 0,
        %{ $req->{log_extra} || {} },
        %x,
    );
    my $ct = $req->{headers}{'content-type'} // '';
    if (length $req->{body}
        && (defined $req->{json} || $ct =~ m{json|^text/|x-www-form-urlencoded}i)) {
        my $s = $req->{body};
        $e{body} = $s if utf8::decode($s);
    }
    $e{json} = $req->{json} if defined $req->{json};
    my $line = $JSON->encode(\%e) . "\n";
    open(my $fh, '>>', $self->{log_file}) or return;
    binmode $fh;
    flock($fh, LOCK_EX);
    syswrite($fh, $line);
    close $fh;
}

# the head of a response up to its own headers (the request is logged
# first, unless it was): the status line, Date, Server, then [headers]
sub _head {
    my ($self, $req, $status, $hdrs, %o) = @_;
    $self->_log($req, status => $status, %{ $o{log} || {} });
    my $head = "HTTP/1.1 $status " . ($REASON{$status} // 'Unknown') . "\r\n"
             . "Date: " . _http_date() . "\r\n"
             . "Server: smcp-fake-$self->{kind}\r\n";
    my @h = @{ $hdrs || [] };
    while (my ($k, $v) = splice(@h, 0, 2)) {
        $head .= "$k: $v\r\n" if defined $v;
    }
    return $head;
}

# _reply($c, $req, $status, [headers], $body, close => 1, log => {fields})
# logs the request (unless already logged), sends the whole response;
# returns true when the connection may be kept
sub _reply {
    my ($self, $c, $req, $status, $hdrs, $body, %o) = @_;
    if (my $f = $self->{_answer_instead}) {     # api_fault apply => 1
        sleep($f->{hang}) if $f->{hang};
        ($status, $hdrs, $body) = ($f->{status} // 502,
            ['Content-Type' => $f->{content_type} // 'application/json'], $f->{body} // '');
    }
    my $head = $self->_head($req, $status, $hdrs, %o);
    $body //= '';
    utf8::encode($body) if utf8::is_utf8($body);
    my $keep = $req->{keep_alive} && !$o{close};
    $head .= "Content-Length: " . length($body) . "\r\n"
        unless $status == 204 || $status == 304;
    $head .= "Connection: " . ($keep ? 'keep-alive' : 'close') . "\r\n\r\n";
    _send_all($c, $head . ($req->{method} eq 'HEAD' ? '' : $body)) or return 0;
    return $keep;
}

sub _json_reply {
    my ($self, $c, $req, $status, $data, $hdrs, %o) = @_;
    return $self->_reply($c, $req, $status,
        ['Content-Type' => 'application/json', @{ $hdrs || [] }],
        $JSON->encode($data), %o);
}

# streaming: chunked for HTTP/1.1, close-delimited for HTTP/1.0
sub _stream_begin {
    my ($self, $c, $req, $status, $hdrs, %o) = @_;
    my $head = $self->_head($req, $status, $hdrs, %o);
    my $chunked = $req->{version} eq '1.1';
    $head .= $chunked ? "Transfer-Encoding: chunked\r\n" : '';
    $head .= "Connection: " . ($chunked && $req->{keep_alive} ? 'keep-alive' : 'close')
           . "\r\n\r\n";
    my $s = { c => $c, chunked => $chunked, ok => 1,
              head_only => $req->{method} eq 'HEAD' };
    $s->{ok} = _send_all($c, $head);
    return $s;
}

sub _stream_write {
    my ($s, $data) = @_;
    return 0 unless $s->{ok};
    return 1 if $s->{head_only} || !length $data;
    utf8::encode($data) if utf8::is_utf8($data);
    $data = sprintf("%x\r\n", length $data) . $data . "\r\n" if $s->{chunked};
    $s->{ok} = _send_all($s->{c}, $data);
    return $s->{ok};
}

# returns true when the connection may be kept
sub _stream_end {
    my ($s, $keep) = @_;
    return 0 unless $s->{ok};
    return 0 unless $s->{chunked};
    return 0 if $s->{head_only};
    $s->{ok} = _send_all($s->{c}, "0\r\n\r\n");
    return $s->{ok} && $keep;
}

sub _rand_id {
    my ($n) = @_;
    return join('', map { ('0' .. '9', 'a' .. 'z', 'A' .. 'Z')[int rand 62] } 1 .. ($n // 24));
}

##############################################################################
# state shared between connection children: small files under dir

sub _state_read {
    my ($self, $name) = @_;
    my $f = "$self->{dir}/$name";
    open(my $fh, '<', $f) or return undef;
    flock($fh, LOCK_SH);
    local $/;
    my $c = <$fh>;
    close $fh;
    return eval { $JSON->decode($c) };
}

sub _state_write {
    my ($self, $name, $data) = @_;
    my $f = "$self->{dir}/$name";
    my $tmp = "$f.tmp.$$";
    open(my $fh, '>', $tmp) or die "write $tmp: $!";
    binmode $fh;
    print $fh $JSON->encode($data);
    close $fh or die "close $tmp: $!";
    rename($tmp, $f) or die "rename $tmp: $!";
}

# _state_update($name, sub { my ($data) = @_; ...; return $new_data })
# under an exclusive lock; returns what the callback returned second
sub _state_update {
    my ($self, $name, $cb) = @_;
    my $f = "$self->{dir}/$name";
    sysopen(my $fh, $f, O_RDWR | O_CREAT) or die "open $f: $!";
    binmode $fh;
    flock($fh, LOCK_EX) or die "flock $f: $!";
    local $/;
    my $c = <$fh>;
    my $data = length($c // '') ? eval { $JSON->decode($c) } : undef;
    my ($new, $ret) = $cb->($data);
    seek($fh, 0, 0);
    truncate($fh, 0);
    print $fh $JSON->encode($new);
    close $fh;
    return $ret;
}

##############################################################################
# scripted turns (the model fakes)

# set_script(\@turns) or set_script(\@turns, model => 'name'): replace the
# script at run time (JSON-serialisable turns only, no code refs); resets
# the turn counters.  set_script(undef) returns to the start() options.
sub set_script {
    my ($self, $turns, %o) = @_;
    if (!defined $turns && !defined $o{model}) {
        unlink "$self->{dir}/script.json";
    } else {
        my $cur = $self->_state_read('script.json') // {};
        if (defined $o{model}) { $cur->{scripts}{ $o{model} } = $turns }
        else { $cur->{script} = $turns }
        $self->_state_write('script.json', $cur);
    }
    $self->reset_turns;
}

sub reset_turns {
    my ($self) = @_;
    opendir(my $dh, $self->{dir}) or return;
    unlink map { "$self->{dir}/$_" } grep { /^turn-/ } readdir $dh;
    closedir $dh;
}

sub _counter_next {
    my ($self, $key) = @_;
    return $self->_state_update('turn-' . sha1_hex($key), sub {
        my ($n) = @_;
        $n = 0 unless defined $n && !ref $n;
        return ($n + 1, $n);
    });
}

# ($index, $turn) for a request to $model
sub _next_turn {
    my ($self, $model, $json, $req) = @_;
    my $dyn = $self->_state_read('script.json');
    my $scripts = $self->{scripts};
    my $script = $self->{script};
    if ($dyn) {
        $scripts = { %{ $scripts || {} }, %{ $dyn->{scripts} || {} } };
        $script = $dyn->{script} if exists $dyn->{script};
    }
    my ($key, $list);
    if ($scripts && defined $model && exists $scripts->{$model}) {
        ($key, $list) = ("model:$model", $scripts->{$model});
    } elsif (defined $script) {
        ($key, $list) = ('default', $script);
    } else {
        return (undef, { text => $self->{text} });
    }
    $list = [$list] unless ref $list eq 'ARRAY';
    $list = [{ text => $self->{text} }] unless @$list;
    my $i = $self->_counter_next($key);
    my $turn = $list->[$i <= $#$list ? $i : $#$list];
    $turn = $turn->($json, $req, $i) if ref $turn eq 'CODE';
    $turn = { text => $turn } unless ref $turn;
    return ($i, $turn);
}

# the start of a model turn, the same for every model API: the script's
# next turn, whether the request streams, the fields of its log line and
# the response headers (a request id under $id_header unless it is undef,
# the turn's own); %more: more fields of the log line (stream: whether it
# streams, when the body's "stream" does not say); a turn that only hangs
# is logged and slept here and returns ()
sub _turn_start {
    my ($self, $req, $j, $model, $id_header, %more) = @_;
    my ($i, $turn) = $self->_next_turn($model, $j, $req);
    my %lx = (turn => $i, model => $model, stream => $j->{stream} ? 1 : 0, %more);
    $lx{hang} = $turn->{hang} if $turn->{hang};
    my @xh = ((defined $id_header ? ($id_header => 'req_' . _rand_id(24)) : ()),
              %{ $turn->{headers} || {} });
    my $has_answer = grep { defined $turn->{$_} } qw(text tool_use tool_calls error);
    if ($turn->{hang} && !$has_answer) {
        $self->_log($req, status => 0, %lx);
        sleep($turn->{hang});
        return ();
    }
    return ($turn, $lx{stream}, \%lx, \@xh);
}

# a turn that is a scripted error, the same for every model API: its
# type ($type when it names none), HTTP status (its own, else the API's
# %$statuses for the type, else 500), message ($msg when it has none) and
# the error itself; its headers join @$xh.  () when the turn answers.
sub _turn_error {
    my ($self, $turn, $xh, $statuses, $type, $msg) = @_;
    my $e = $turn->{error} or return ();
    $type = $e->{type} // $type;
    push @$xh, %{ $e->{headers} || {} };
    return ($type, $e->{status} // $statuses->{$type} // 500,
            $e->{message} // $msg, $e);
}

# the log line of a turn's answer, then the turn's hang before it is sent
sub _log_hang {
    my ($self, $req, $turn, %lx) = @_;
    $self->_log($req, %lx);
    sleep($turn->{hang}) if $turn->{hang};
}

sub _split_text {
    my ($text, $n) = @_;
    return () if !defined $text || $text eq '';
    $n = 1 if !$n || $n < 1;
    my @w = $text =~ /(\s*\S+|\s+\z)/g;
    return ($text) unless join('', @w) eq $text;
    my $per = int((@w + $n - 1) / $n) || 1;
    my @p;
    push @p, join('', splice(@w, 0, $per)) while @w;
    return @p;
}

sub _split_even {
    my ($s, $n) = @_;
    return ('') if $s eq '';
    $n = 1 if !$n || $n < 1;
    my $per = int((length($s) + $n - 1) / $n) || 1;
    my @p;
    for (my $i = 0; $i < length $s; $i += $per) { push @p, substr($s, $i, $per) }
    return @p;
}

sub _count_words {
    my ($s) = @_;
    return 0 unless defined $s;
    my @w = $s =~ /\S+/g;
    return scalar @w;
}

# the content of a turn: list of {type => text|tool_use, ...}
sub _turn_blocks {
    my ($self, $turn, $id_prefix) = @_;
    my @b;
    push @b, { type => 'text', text => $turn->{text} } if defined $turn->{text};
    my $tu = $turn->{tool_use} // $turn->{tool_calls};
    if ($tu) {
        for my $t (ref $tu eq 'ARRAY' ? @$tu : ($tu)) {
            push @b, { type => 'tool_use', name => $t->{name},
                       id => $t->{id} // ($id_prefix . _rand_id(24)),
                       input => $t->{input} // $t->{arguments} // {} };
        }
    }
    push @b, { type => 'text', text => '' } unless @b;
    return @b;
}

sub _usage {
    my ($self, $turn, @blocks) = @_;
    my $u = $turn->{usage} || {};
    my $in = $u->{input_tokens} // $u->{prompt_tokens} // $self->{input_tokens} // 12;
    my $out = $u->{output_tokens} // $u->{completion_tokens};
    if (!defined $out) {
        $out = 0;
        for my $b (@blocks) {
            $out += $b->{type} eq 'text' ? _count_words($b->{text})
                  : 5 + int(length($JSON->encode($b->{input})) / 4);
        }
        $out = 1 if $out < 1;
    }
    return ($in, $out);
}

# send a prepared list of SSE event strings with the turn's delay
sub _send_events {
    my ($self, $c, $req, $status, $hdrs, $events, $turn, %o) = @_;
    my $delay = $turn->{delay} // $turn->{chunk_delay} // $self->{chunk_delay} // 0;
    my $abort = $turn->{abort_after};
    my $s = $self->_stream_begin($c, $req, $status, $hdrs, %o);
    my $n = 0;
    for my $ev (@$events) {
        if (defined $abort && $n >= $abort) {
            return 0;    # the connection is closed without the last chunk
        }
        sleep($delay) if $n && $delay > 0;
        _stream_write($s, $ev) or return 0;
        $n++;
    }
    return _stream_end($s, $req->{keep_alive});
}

##############################################################################
# fake Anthropic Messages API

package SMCP::Fakes::Anthropic;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::Server');
use Time::HiRes qw(sleep);

my %ANTHROPIC_STATUS = (
    invalid_request_error => 400, authentication_error => 401,
    permission_error => 403, not_found_error => 404, request_too_large => 413,
    rate_limit_error => 429, api_error => 500, overloaded_error => 529,
);

sub _defaults {
    return (kind => 'anthropic', key => 'test-anthropic-key',
            text => 'Hello from the fake Anthropic API.', deltas => 3,
            chunk_delay => 0);
}

sub _key_ok {
    my ($self, $got) = @_;
    return 1 unless defined $self->{key};
    return defined $got && $got eq $self->{key};
}

sub _err_body {
    my ($type, $msg) = @_;
    return { type => 'error', error => { type => $type, message => $msg } };
}

sub _aerr {
    my ($self, $c, $req, $status, $type, $msg, $hdrs, %o) = @_;
    return $self->_json_reply($c, $req, $status, _err_body($type, $msg),
        ['request-id' => 'req_' . SMCP::Fakes::Server::_rand_id(24),
         'x-should-retry' => ($status >= 500 || $status == 429 ? 'true' : 'false'),
         @{ $hdrs || [] }], %o);
}

sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    if ($p eq '/v1/messages' || $p eq '/v1/messages/count_tokens') {
        return $self->_aerr($c, $req, 405, 'invalid_request_error',
                            "Method $m not allowed") unless $m eq 'POST';
        return $self->_aerr($c, $req, 401, 'authentication_error',
                            'invalid x-api-key')
            unless $self->_key_ok($req->{headers}{'x-api-key'});
        if ($self->{require_version} && !defined $req->{headers}{'anthropic-version'}) {
            return $self->_aerr($c, $req, 400, 'invalid_request_error',
                                'anthropic-version: header is required');
        }
        my $j = $req->{json};
        return $self->_aerr($c, $req, 400, 'invalid_request_error',
                            'There was an issue with your request body: invalid JSON')
            unless ref $j eq 'HASH';
        if ($self->{strict}) {
            for my $f (qw(model max_tokens messages)) {
                return $self->_aerr($c, $req, 400, 'invalid_request_error',
                                    "$f: Field required")
                    unless defined $j->{$f} || ($f eq 'max_tokens' && $p =~ /count_tokens/);
            }
        }
        if ($p eq '/v1/messages/count_tokens') {
            return $self->_json_reply($c, $req, 200,
                { input_tokens => $self->{input_tokens} // 12 });
        }
        return $self->_message($req, $c, $j);
    }
    return $self->_aerr($c, $req, 404, 'not_found_error', 'Not Found');
}

sub _message {
    my ($self, $req, $c, $j) = @_;
    my $model = $j->{model} // 'claude-fake';
    my ($turn, $stream, $lx, $xh) = $self->_turn_start($req, $j, $model, 'request-id')
        or return 0;
    my %lx = %$lx;
    my @xh = @$xh;

    if (my ($type, $status, $msg, $e) = $self->_turn_error($turn, \@xh,
            \%ANTHROPIC_STATUS, 'api_error', 'Internal server error')) {
        if ($e->{in_stream} && $stream) {
            # a 200 stream that fails after message_start (overloaded mid-stream)
            my @ev = (_ev(message_start => { type => 'message_start',
                          message => _msg_shell($model, 'msg_' . SMCP::Fakes::Server::_rand_id(24), $self->_usage($turn)) }),
                      _ev(error => _err_body($type, $msg)));
            $self->_log_hang($req, $turn, status => 200, %lx, error => $type);
            return $self->_send_events($c, $req, 200,
                ['Content-Type' => 'text/event-stream; charset=utf-8',
                 'Cache-Control' => 'no-cache', @xh], \@ev, $turn);
        }
        $self->_log_hang($req, $turn, status => $status, %lx, error => $type);
        return $self->_aerr($c, $req, $status, $type, $msg, \@xh);
    }

    my @blocks = $self->_turn_blocks($turn, 'toolu_');
    my ($in, $out) = $self->_usage($turn, @blocks);
    my $has_tool = grep { $_->{type} eq 'tool_use' } @blocks;
    my $stop = $turn->{stop_reason} // ($has_tool ? 'tool_use' : 'end_turn');
    my $msgid = 'msg_' . SMCP::Fakes::Server::_rand_id(24);

    $self->_log_hang($req, $turn, status => 200, %lx);

    if (!$stream) {
        my @content = map {
            $_->{type} eq 'text'
                ? { type => 'text', text => $_->{text} }
                : { type => 'tool_use', id => $_->{id}, name => $_->{name},
                    input => $_->{input} }
        } @blocks;
        return $self->_json_reply($c, $req, 200, {
            id => $msgid, type => 'message', role => 'assistant',
            model => $model, content => \@content,
            stop_reason => $stop, stop_sequence => undef,
            usage => { input_tokens => $in, output_tokens => $out,
                       cache_creation_input_tokens => 0,
                       cache_read_input_tokens => 0 },
        }, \@xh);
    }

    my $deltas = $turn->{deltas} // $self->{deltas};
    my @ev;
    push @ev, _ev(message_start => { type => 'message_start',
                                     message => _msg_shell($model, $msgid, $in) });
    my $idx = 0;
    for my $b (@blocks) {
        if ($b->{type} eq 'text') {
            push @ev, _ev(content_block_start => { type => 'content_block_start',
                index => $idx, content_block => { type => 'text', text => '' } });
            push @ev, _ev(ping => { type => 'ping' }) if $self->{ping} && $idx == 0;
            my @pieces = $turn->{chunks} ? @{ $turn->{chunks} }
                                         : SMCP::Fakes::Server::_split_text($b->{text}, $deltas);
            for my $piece (@pieces) {
                push @ev, _ev(content_block_delta => { type => 'content_block_delta',
                    index => $idx, delta => { type => 'text_delta', text => $piece } });
            }
        } else {
            push @ev, _ev(content_block_start => { type => 'content_block_start',
                index => $idx, content_block => { type => 'tool_use', id => $b->{id},
                                                  name => $b->{name}, input => {} } });
            push @ev, _ev(ping => { type => 'ping' }) if $self->{ping} && $idx == 0;
            my $js = $SMCP::Fakes::Server::JSON_CHARS->encode($b->{input});
            for my $piece ('', SMCP::Fakes::Server::_split_even($js, $deltas)) {
                push @ev, _ev(content_block_delta => { type => 'content_block_delta',
                    index => $idx, delta => { type => 'input_json_delta',
                                              partial_json => $piece } });
            }
        }
        push @ev, _ev(content_block_stop => { type => 'content_block_stop', index => $idx });
        $idx++;
    }
    push @ev, _ev(message_delta => { type => 'message_delta',
        delta => { stop_reason => $stop, stop_sequence => undef },
        usage => { input_tokens => $in, output_tokens => $out,
                   cache_creation_input_tokens => 0, cache_read_input_tokens => 0 } });
    push @ev, _ev(message_stop => { type => 'message_stop' });

    return $self->_send_events($c, $req, 200,
        ['Content-Type' => 'text/event-stream; charset=utf-8',
         'Cache-Control' => 'no-cache', @xh], \@ev, $turn, log => {});
}

sub _msg_shell {
    my ($model, $id, $in) = @_;
    return { id => $id, type => 'message', role => 'assistant', model => $model,
             content => [], stop_reason => undef, stop_sequence => undef,
             usage => { input_tokens => $in // 12, output_tokens => 1,
                        cache_creation_input_tokens => 0,
                        cache_read_input_tokens => 0 } };
}

sub _ev {
    my ($name, $data) = @_;
    return "event: $name\ndata: " . $SMCP::Fakes::Server::JSON->encode($data) . "\n\n";
}

##############################################################################
# fake OpenAI-compatible chat completions API

package SMCP::Fakes::OpenAI;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::Server');
use Time::HiRes qw(sleep time);

my %OPENAI_STATUS = (
    invalid_request_error => 400, authentication_error => 401,
    permission_error => 403, not_found_error => 404,
    rate_limit_exceeded => 429, insufficient_quota => 429, requests => 429,
    server_error => 500, api_error => 500,
);

sub _defaults {
    return (kind => 'openai', key => 'test-openai-key',
            text => 'Hello from the fake OpenAI API.', deltas => 3,
            chunk_delay => 0);
}

sub _oerr {
    my ($self, $c, $req, $status, $type, $msg, $code, $hdrs, %o) = @_;
    return $self->_json_reply($c, $req, $status,
        { error => { message => $msg, type => $type, param => undef, code => $code } },
        ['x-request-id' => 'req_' . SMCP::Fakes::Server::_rand_id(24), @{ $hdrs || [] }], %o);
}

sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    my $is_chat = $p eq '/v1/chat/completions' || $p eq '/chat/completions';
    my $is_resp = $p eq '/v1/responses' || $p eq '/responses';
    my $is_models = $p eq '/v1/models' || $p eq '/models';
    if ($is_chat || $is_resp || $is_models) {
        my ($tok) = ($req->{headers}{authorization} // '') =~ /^Bearer\s+(\S+)\s*$/i;
        if (defined $self->{key} && !(defined $tok && $tok eq $self->{key})) {
            my $msg = defined $tok
                ? 'Incorrect API key provided: ' . _mask($tok)
                  . '. You can find your API key at https://platform.openai.com/account/api-keys.'
                : "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).";
            return $self->_oerr($c, $req, 401, 'invalid_request_error', $msg,
                                defined $tok ? 'invalid_api_key' : undef);
        }
        if ($is_models) {
            my @ids = @{ $self->{models} || ['gpt-fake'] };
            return $self->_json_reply($c, $req, 200, { object => 'list',
                data => [ map { { id => $_, object => 'model', created => 1700000000,
                                  owned_by => 'smcp-fake' } } @ids ] });
        }
        return $self->_oerr($c, $req, 405, 'invalid_request_error',
                            "Method $m not allowed", undef) unless $m eq 'POST';
        my $j = $req->{json};
        return $self->_oerr($c, $req, 400, 'invalid_request_error',
                            'We could not parse the JSON body of your request.', undef)
            unless ref $j eq 'HASH';
        return $is_resp ? $self->_responses($req, $c, $j) : $self->_chat($req, $c, $j);
    }
    return $self->_oerr($c, $req, 404, 'invalid_request_error',
                        "Invalid URL ($m $p)", undef);
}

sub _mask {
    my ($k) = @_;
    return length $k > 8 ? substr($k, 0, 3) . '*' x 10 . substr($k, -4) : '*' x length $k;
}

# the turn of a generation request of the OpenAI-shaped APIs (chat,
# responses, and the Azure, Gemini and gateway fakes built on them):
# (turn, \%log_fields, \@headers, model), or (undef, $keep) when the turn
# was a hang or an error and is answered already.  %o: model => (a
# deployment's, over the body's), log => {...} (more log fields)
sub _turn_or_answer {
    my ($self, $req, $c, $j, $default_model, %o) = @_;
    my $model = $o{model} // $j->{model} // $default_model;
    my ($turn, $stream, $lxr, $xhr) = $self->_turn_start($req, $j, $model, 'x-request-id')
        or return (undef, 0);
    my %lx = (%$lxr, %{ $o{log} || {} });
    my @xh = @$xhr;
    if (my ($type, $status, $msg, $e) = $self->_turn_error($turn, \@xh,
            \%OPENAI_STATUS, 'server_error', 'The server had an error.')) {
        $self->_log_hang($req, $turn, status => $status, %lx, error => $type);
        return (undef, $self->_oerr($c, $req, $status, $type, $msg, $e->{code}, \@xh));
    }
    return ($turn, \%lx, \@xh, $model);
}

sub _chat {
    my ($self, $req, $c, $j, %o) = @_;
    my ($turn, $lxr, $xhr, $model) = $self->_turn_or_answer($req, $c, $j, 'gpt-fake', %o);
    return $lxr unless $turn;
    my %lx = %$lxr;
    my @xh = @$xhr;
    my $stream = $lx{stream};

    my @blocks = $self->_turn_blocks($turn, 'call_');
    my ($in, $out) = $self->_usage($turn, @blocks);
    my @tools = grep { $_->{type} eq 'tool_use' } @blocks;
    my ($textb) = grep { $_->{type} eq 'text' } @blocks;
    my $finish = $turn->{finish_reason} // $turn->{stop_reason}
                 // (@tools ? 'tool_calls' : 'stop');
    my $id = 'chatcmpl-' . SMCP::Fakes::Server::_rand_id(29);
    my $created = int(time());
    my $usage = { prompt_tokens => $in, completion_tokens => $out,
                  total_tokens => $in + $out };

    $self->_log_hang($req, $turn, status => 200, %lx);

    if (!$stream) {
        my %msg = (role => 'assistant',
                   content => (defined $turn->{text} || !@tools) ? ($textb ? $textb->{text} : '') : undef,
                   refusal => undef);
        $msg{tool_calls} = [ map { { id => $_->{id}, type => 'function',
            function => { name => $_->{name},
                          arguments => $SMCP::Fakes::Server::JSON_CHARS->encode($_->{input}) } } } @tools ]
            if @tools;
        return $self->_json_reply($c, $req, 200, {
            id => $id, object => 'chat.completion', created => $created,
            model => $model, system_fingerprint => 'fp_smcpfake',
            choices => [ { index => 0, message => \%msg, logprobs => undef,
                           finish_reason => $finish } ],
            usage => $usage,
        }, \@xh);
    }

    my $deltas = $turn->{deltas} // $self->{deltas};
    my $chunk = sub {
        my ($delta, $fin, %x) = @_;
        return _data({ id => $id, object => 'chat.completion.chunk',
                       created => $created, model => $model,
                       system_fingerprint => 'fp_smcpfake',
                       choices => [ { index => 0, delta => $delta,
                                      logprobs => undef, finish_reason => $fin } ],
                       %x });
    };
    my @ev;
    push @ev, $chunk->({ role => 'assistant', content => '', refusal => undef }, undef);
    if ($textb && length $textb->{text}) {
        my @pieces = $turn->{chunks} ? @{ $turn->{chunks} }
                                     : SMCP::Fakes::Server::_split_text($textb->{text}, $deltas);
        push @ev, $chunk->({ content => $_ }, undef) for @pieces;
    }
    my $k = 0;
    for my $t (@tools) {
        push @ev, $chunk->({ tool_calls => [ { index => $k, id => $t->{id},
            type => 'function', function => { name => $t->{name}, arguments => '' } } ] }, undef);
        my $js = $SMCP::Fakes::Server::JSON_CHARS->encode($t->{input});
        for my $piece (SMCP::Fakes::Server::_split_even($js, $deltas)) {
            push @ev, $chunk->({ tool_calls => [ { index => $k,
                function => { arguments => $piece } } ] }, undef);
        }
        $k++;
    }
    push @ev, $chunk->({}, $finish);
    my $so = $j->{stream_options};
    if ((ref $so eq 'HASH' && $so->{include_usage}) || $self->{always_usage}) {
        push @ev, _data({ id => $id, object => 'chat.completion.chunk',
                          created => $created, model => $model,
                          system_fingerprint => 'fp_smcpfake',
                          choices => [], usage => $usage });
    }
    push @ev, "data: [DONE]\n\n";
    return $self->_send_events($c, $req, 200,
        ['Content-Type' => 'text/event-stream; charset=utf-8',
         'Cache-Control' => 'no-cache', @xh], \@ev, $turn);
}

sub _data {
    return 'data: ' . $SMCP::Fakes::Server::JSON->encode($_[0]) . "\n\n";
}

# OpenAI Responses API (POST /v1/responses): a response object, or with
# stream: true SSE events (event: TYPE, data: {type, sequence_number, ...}):
# response.created, response.in_progress, per output item
# response.output_item.added, (message) response.content_part.added,
# response.output_text.delta x N, response.output_text.done,
# response.content_part.done, (function call)
# response.function_call_arguments.delta x N, ...arguments.done, then
# response.output_item.done; last response.completed with the usage
sub _responses {
    my ($self, $req, $c, $j, %o) = @_;
    my ($turn, $lxr, $xhr, $model) = $self->_turn_or_answer($req, $c, $j, 'gpt-fake', %o);
    return $lxr unless $turn;
    my %lx = %$lxr;
    my @xh = @$xhr;
    my $rand = \&SMCP::Fakes::Server::_rand_id;

    my @blocks = $self->_turn_blocks($turn, 'call_');
    my ($in, $out) = $self->_usage($turn, @blocks);
    my @items;
    for my $b (@blocks) {
        if ($b->{type} eq 'text') {
            next if $b->{text} eq '' && @blocks > 1;
            push @items, { type => 'message', id => 'msg_' . $rand->(32),
                status => 'completed', role => 'assistant',
                content => [ { type => 'output_text', text => $b->{text},
                               annotations => [], logprobs => [] } ] };
        } else {
            push @items, { type => 'function_call', id => 'fc_' . $rand->(32),
                call_id => $b->{id}, name => $b->{name},
                arguments => $SMCP::Fakes::Server::JSON_CHARS->encode($b->{input}),
                status => 'completed' };
        }
    }
    my $usage = { input_tokens => $in, input_tokens_details => { cached_tokens => 0 },
                  output_tokens => $out,
                  output_tokens_details => { reasoning_tokens => 0 },
                  total_tokens => $in + $out };
    my ($rid, $created) = ('resp_' . $rand->(40), int(time()));
    my $response = sub {
        my ($status, $output, $u) = @_;
        return { id => $rid, object => 'response', created_at => $created,
                 status => $status, error => undef, incomplete_details => undef,
                 model => $model, output => $output, usage => $u,
                 parallel_tool_calls => JSON::PP::true, store => JSON::PP::false,
                 service_tier => 'default', metadata => {} };
    };

    $self->_log_hang($req, $turn, status => 200, %lx);

    return $self->_json_reply($c, $req, 200, $response->('completed', \@items, $usage), \@xh)
        unless $lx{stream};

    my $deltas = $turn->{deltas} // $self->{deltas};
    my $seq = 0;
    my @ev;
    my $ev = sub {
        my ($type, %d) = @_;
        push @ev, "event: $type\ndata: " . $SMCP::Fakes::Server::JSON->encode(
            { type => $type, sequence_number => $seq++, %d }) . "\n\n";
    };
    $ev->('response.created', response => $response->('in_progress', [], undef));
    $ev->('response.in_progress', response => $response->('in_progress', [], undef));
    my $k = 0;
    for my $item (@items) {
        my %at = (output_index => $k, item_id => $item->{id});
        if ($item->{type} eq 'message') {
            my $text = $item->{content}[0]{text};
            $ev->('response.output_item.added', output_index => $k,
                  item => { %$item, status => 'in_progress', content => [] });
            $ev->('response.content_part.added', %at, content_index => 0,
                  part => { type => 'output_text', text => '', annotations => [] });
            my @pieces = $turn->{chunks} ? @{ $turn->{chunks} }
                                         : SMCP::Fakes::Server::_split_text($text, $deltas);
            $ev->('response.output_text.delta', %at, content_index => 0,
                  delta => $_, logprobs => []) for @pieces;
            $ev->('response.output_text.done', %at, content_index => 0,
                  text => $text, logprobs => []);
            $ev->('response.content_part.done', %at, content_index => 0,
                  part => $item->{content}[0]);
        } else {
            $ev->('response.output_item.added', output_index => $k,
                  item => { %$item, status => 'in_progress', arguments => '' });
            $ev->('response.function_call_arguments.delta', %at, delta => $_)
                for SMCP::Fakes::Server::_split_even($item->{arguments}, $deltas);
            $ev->('response.function_call_arguments.done', %at,
                  arguments => $item->{arguments});
        }
        $ev->('response.output_item.done', output_index => $k, item => $item);
        $k++;
    }
    $ev->('response.completed', response => $response->('completed', \@items, $usage));
    return $self->_send_events($c, $req, 200,
        ['Content-Type' => 'text/event-stream; charset=utf-8',
         'Cache-Control' => 'no-cache', @xh], \@ev, $turn);
}

##############################################################################
# fake Azure OpenAI: the OpenAI fake behind Azure's paths and key header

package SMCP::Fakes::Azure;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::OpenAI');

sub _defaults {
    return (kind => 'azure', key => 'test-azure-key',
            text => 'Hello from the fake Azure OpenAI API.', deltas => 3,
            chunk_delay => 0);
}

# what OpenCode's baseURL for Azure's v1 API is: {resource}/openai/v1
sub base_url { $_[0]->url . '/openai/v1' }

sub _aerr {
    my ($self, $c, $req, $status, $code, $msg) = @_;
    return $self->_json_reply($c, $req, $status,
        { error => { code => $code, message => $msg } },
        ['apim-request-id' => SMCP::Fakes::Server::_rand_id(32)]);
}

# /openai/v1/{responses,chat/completions} (the v1 API: api-version
# optional, v1 or preview; the deployment is the body's model),
# /openai/deployments/D/{responses,chat/completions} and /openai/responses
# (api-version required; the deployment is in the path)
sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    my ($ver) = ($req->{query} // '') =~ /(?:^|&)api-version=([^&]*)/;
    my ($v1, $dep, $what);
    if ($p =~ m{^/openai/v1/(responses|chat/completions)$}) {
        ($v1, $what) = (1, $1);
    } elsif ($p =~ m{^/openai/deployments/([A-Za-z0-9._-]+)/(responses|chat/completions)$}) {
        ($dep, $what) = ($1, $2);
    } elsif ($p eq '/openai/responses') {
        $what = 'responses';
    }
    return $self->_aerr($c, $req, 404, '404', 'Resource not found')
        if !$what || (!$v1 && !length($ver // ''))
           || ($v1 && defined $ver && $ver !~ /^(v1|preview|latest)$/);
    return $self->_aerr($c, $req, 401, '401',
        'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.')
        if defined $self->{key} && ($req->{headers}{'api-key'} // '') ne $self->{key};
    return $self->_aerr($c, $req, 405, '405', "Method $m not allowed") unless $m eq 'POST';
    my $j = $req->{json};
    return $self->_aerr($c, $req, 400, 'invalid_request_error',
                        'We could not parse the JSON body of your request.')
        unless ref $j eq 'HASH';
    my %o = (log => { deployment => $dep // $j->{model}, api_version => $ver },
             (defined $dep ? (model => $dep) : ()));
    return $what eq 'responses' ? $self->_responses($req, $c, $j, %o)
                                : $self->_chat($req, $c, $j, %o);
}

##############################################################################
# fake Google Gemini API (generativelanguage.googleapis.com)

package SMCP::Fakes::Gemini;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::Server');
use Time::HiRes qw(sleep);

my %GOOGLE_STATUS = (
    INVALID_ARGUMENT => 400, FAILED_PRECONDITION => 400, PERMISSION_DENIED => 403,
    NOT_FOUND => 404, RESOURCE_EXHAUSTED => 429, INTERNAL => 500,
    UNAVAILABLE => 503, DEADLINE_EXCEEDED => 504,
);

sub _defaults {
    return (kind => 'google', key => 'test-google-key',
            text => 'Hello from the fake Gemini API.', deltas => 3,
            chunk_delay => 0);
}

sub key { $_[0]{key} }
sub base_url { $_[0]->url . '/v1beta' }

sub _gerr {
    my ($self, $c, $req, $status, $gstatus, $msg, $hdrs, %o) = @_;
    return $self->_json_reply($c, $req, $status,
        { error => { code => $status, message => $msg, status => $gstatus } },
        $hdrs, %o);
}

# POST /v1beta/models/M:{streamGenerateContent,generateContent,countTokens}
# (and /v1/...); the key in x-goog-api-key or ?key=; streamGenerateContent
# answers SSE with ?alt=sse, else a JSON array
sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    my ($ver, $model, $verb) =
        $p =~ m{^/(v1beta|v1)/models/([A-Za-z0-9._-]+):(streamGenerateContent|generateContent|countTokens)$}
        or return $self->_gerr($c, $req, 404, 'NOT_FOUND', "Method not found: $p");
    my %q = map { my ($k, $v) = split /=/, $_, 2; ($k => $v // '') }
            split /&/, $req->{query} // '';
    my $key = $req->{headers}{'x-goog-api-key'} // $q{key};
    if (defined $self->{key} && !(defined $key && $key eq $self->{key})) {
        return $self->_gerr($c, $req, 403, 'PERMISSION_DENIED',
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
            unless defined $key;
        return $self->_json_reply($c, $req, 400, { error => { code => 400,
            message => 'API key not valid. Please pass a valid API key.',
            status => 'INVALID_ARGUMENT',
            details => [ { '@type' => 'type.googleapis.com/google.rpc.ErrorInfo',
                           reason => 'API_KEY_INVALID', domain => 'googleapis.com',
                           metadata => { service => 'generativelanguage.googleapis.com' } } ] } });
    }
    return $self->_gerr($c, $req, 405, 'INVALID_ARGUMENT', "Method $m not allowed")
        unless $m eq 'POST';
    my $j = $req->{json};
    return $self->_gerr($c, $req, 400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.')
        unless ref $j eq 'HASH';
    if ($verb eq 'countTokens') {
        return $self->_json_reply($c, $req, 200,
            { totalTokens => $self->{input_tokens} // 12 });
    }
    return $self->_generate($req, $c, $j, $model,
                            $verb eq 'streamGenerateContent', ($q{alt} // '') eq 'sse');
}

sub _generate {
    my ($self, $req, $c, $j, $model, $stream, $sse) = @_;
    my ($turn, undef, $lx, $xh) = $self->_turn_start($req, $j, $model, undef,
        stream => $stream ? 1 : 0, sse => $sse ? 1 : 0)
        or return 0;
    my %lx = %$lx;
    my @xh = @$xh;

    if (my ($type, $status, $msg) = $self->_turn_error($turn, \@xh,
            \%GOOGLE_STATUS, 'INTERNAL', 'An internal error has occurred.')) {
        $self->_log_hang($req, $turn, status => $status, %lx, error => $type);
        return $self->_gerr($c, $req, $status, $type, $msg, \@xh);
    }

    my @blocks = $self->_turn_blocks($turn, '');
    my ($in, $out) = $self->_usage($turn, @blocks);
    my $usage = { promptTokenCount => $in, candidatesTokenCount => $out,
                  totalTokenCount => $in + $out };
    my $rid = SMCP::Fakes::Server::_rand_id(22);
    my $chunk = sub {
        my ($parts, $last) = @_;
        return { candidates => [ { content => { parts => $parts, role => 'model' },
                                   index => 0,
                                   ($last ? (finishReason => $turn->{finish_reason} // 'STOP') : ()) } ],
                 ($last ? (usageMetadata => $usage) : ()),
                 modelVersion => $model, responseId => $rid };
    };
    my @parts;
    for my $b (@blocks) {
        if ($b->{type} eq 'text') {
            push @parts, { text => $b->{text} } if $b->{text} ne '' || @blocks == 1;
        } else {
            push @parts, { functionCall => { name => $b->{name}, args => $b->{input} } };
        }
    }

    $self->_log_hang($req, $turn, status => 200, %lx);

    return $self->_json_reply($c, $req, 200, $chunk->(\@parts, 1), \@xh) unless $stream;

    # text parts in pieces, one chunk each; function calls whole; the last
    # chunk carries finishReason and usageMetadata
    my $deltas = $turn->{deltas} // $self->{deltas};
    my @chunks;
    for my $part (@parts) {
        if (defined $part->{text}) {
            my @pieces = $turn->{chunks} ? @{ $turn->{chunks} }
                                         : SMCP::Fakes::Server::_split_text($part->{text}, $deltas);
            push @chunks, [ { text => $_ } ] for (@pieces ? @pieces : (''));
        } else {
            push @chunks, [ $part ];
        }
    }
    my @data = map { $chunk->($chunks[$_], $_ == $#chunks) } 0 .. $#chunks;
    my $enc = $SMCP::Fakes::Server::JSON;
    my @ev = $sse
        ? (map { 'data: ' . $enc->encode($_) . "\r\n\r\n" } @data)
        : (map { ($_ ? ",\r\n" : '[') . $enc->encode($data[$_]) . ($_ == $#data ? ']' : '') } 0 .. $#data);
    return $self->_send_events($c, $req, 200,
        ['Content-Type' => $sse ? 'text/event-stream' : 'application/json; charset=UTF-8', @xh],
        \@ev, $turn);
}

##############################################################################
# fake Cloudflare AI Gateway: /v1/ACCOUNT/GATEWAY/PROVIDER/..., the
# gateway token in cf-aig-authorization, the provider's own protocol
# behind it (the other model fakes, sharing this fake's script and log)

package SMCP::Fakes::Cloudflare;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::Server');

sub _defaults {
    return (kind => 'cloudflare', account => 'test-account', gateway => 'test-gateway',
            token => 'test-cf-aig-token', text => 'Hello through the fake AI Gateway.',
            deltas => 3, chunk_delay => 0);
}

sub token { $_[0]{token} }
sub key { $_[0]{token} }
sub base_url { $_[0]->url . "/v1/$_[0]{account}/$_[0]{gateway}" }

# the protocol fakes behind the gateway: same state dir, log and scripts;
# provider keys are not checked (the gateway pays: unified billing or
# keys stored in the gateway)
sub _init {
    my ($self) = @_;
    my %base = map { ($_ => $self->{$_}) } grep { !/^(kind|key|token)$/ } keys %$self;
    $self->{via} = {
        anthropic          => bless({ %base, kind => 'anthropic', key => undef }, 'SMCP::Fakes::Anthropic'),
        openai             => bless({ %base, kind => 'openai', key => undef }, 'SMCP::Fakes::OpenAI'),
        'google-ai-studio' => bless({ %base, kind => 'google', key => undef }, 'SMCP::Fakes::Gemini'),
    };
}

sub _cferr {
    my ($self, $c, $req, $status, $code, $msg) = @_;
    return $self->_json_reply($c, $req, $status, { success => JSON::PP::false,
        result => [], messages => [], error => [ { code => $code, message => $msg } ] });
}

# anthropic/v1/messages(/count_tokens), openai/{responses,chat/completions},
# compat/chat/completions, workers-ai/v1/chat/completions,
# google-ai-studio/v1beta/models/M:..., azure-openai/RESOURCE/DEPLOYMENT/
# chat/completions; logged with provider and provider_path
sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    my ($acct, $gw, $prov, $rest) = $p =~ m{^/v1/([^/]+)/([^/]+)/([^/]+)(/.*)?$}
        or return $self->_cferr($c, $req, 404, 7000, 'No route for that URI');
    return $self->_cferr($c, $req, 400, 2001, 'Please configure AI Gateway in the Cloudflare dashboard')
        unless $acct eq $self->{account} && $gw eq $self->{gateway};
    my ($tok) = ($req->{headers}{'cf-aig-authorization'} // '') =~ /^Bearer\s+(\S+)\s*$/i;
    return $self->_cferr($c, $req, 401, 2009, 'Unauthorized')
        if defined $self->{token} && !(defined $tok && $tok eq $self->{token});
    $rest //= '';
    $req->{log_extra} = { path => $p, provider => $prov, provider_path => $rest };
    my $v = $self->{via};
    if ($prov eq 'anthropic' || $prov eq 'google-ai-studio') {
        $req->{path} = $rest;
        my $keep = $v->{$prov}->_handle($req, $c);
        $req->{path} = $p;
        return $keep;
    }
    my $oai = $v->{openai};
    my ($dep) = $prov eq 'azure-openai'
        ? $rest =~ m{^/[A-Za-z0-9._-]+/([A-Za-z0-9._-]+)/chat/completions$} : ();
    my $what = $prov eq 'openai' && $rest =~ m{^/(responses|chat/completions)$} ? $1
             : $prov eq 'compat' && $rest eq '/chat/completions' ? 'chat/completions'
             : $prov eq 'workers-ai' && $rest eq '/v1/chat/completions' ? 'chat/completions'
             : $dep ? 'chat/completions' : undef;
    return $self->_cferr($c, $req, 404, 7000, "No route for that URI") unless $what;
    return $self->_cferr($c, $req, 405, 7001, "Method $m not allowed") unless $m eq 'POST';
    my $j = $req->{json};
    return $self->_cferr($c, $req, 400, 2008, 'Invalid JSON body') unless ref $j eq 'HASH';
    return $what eq 'responses'
        ? $oai->_responses($req, $c, $j)
        : $oai->_chat($req, $c, $j, ($dep ? (model => $dep) : ()));
}

##############################################################################
# fake GitHub: git smart HTTP (git http-backend) and the REST API

package SMCP::Fakes::GitHub;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::Server');

use Digest::SHA qw(sha1_hex);
use File::Basename qw(dirname);
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use JSON::PP ();
use MIME::Base64 qw(encode_base64 decode_base64);
use POSIX qw(:sys_wait_h);

sub _defaults {
    return (kind => 'github', token => 'test-github-token',
            user => 'x-access-token', login => 'smcp-bot',
            web_base => 'https://github.com', api_base => 'https://api.github.com',
            default_branch => 'main');
}

sub _init {
    my ($self) = @_;
    $self->{root} //= $self->{git}->root if ref $self->{git};
    $self->{root} //= "$self->{dir}/repos";
    make_path($self->{root});
    $self->{git_token} //= $self->{token};
    $self->{api_token} //= $self->{token};
    my $repos = $self->{repos} // {};
    $repos = { map { ($_ => {}) } @$repos } if ref $repos eq 'ARRAY';
    $self->_state_write('repos.json', $repos);
}

sub root  { $_[0]{root} }
sub token { $_[0]{token} }

sub _split_repo {
    my ($name) = @_;
    my ($o, $r) = $name =~ m{^/?([^/]+)/([^/]+?)(?:\.git)?/?$}
        or die "SMCP::Fakes: bad repository name '$name' (want owner/repo)\n";
    return ($o, $r);
}

sub repo_path {
    my ($self, $name) = @_;
    my ($o, $r) = _split_repo($name);
    return "$self->{root}/$o/$r.git";
}

sub clone_url {
    my ($self, $name) = @_;
    my ($o, $r) = _split_repo($name);
    return $self->url . "/$o/$r.git";
}

# the header git needs: "Authorization: Basic base64(user:token)"
sub auth_header {
    my ($self, $token, $user) = @_;
    $token //= $self->{git_token};
    $user //= $self->{user} // 'x-access-token';
    return 'Authorization: Basic ' . encode_base64("$user:$token", '');
}

# ('-c', 'http.extraHeader=Authorization: Basic ...') for git's argv
sub git_auth_args {
    my ($self, $token, $user) = @_;
    return ('-c', 'http.extraHeader=' . $self->auth_header($token, $user));
}

# add_repo('owner/repo', default_branch => 'main', private => 1): a repository
# the REST API knows even without a bare repository under root
sub add_repo {
    my ($self, $name, %attrs) = @_;
    my ($o, $r) = _split_repo($name);
    $self->_state_update('repos.json', sub {
        my ($d) = @_;
        $d ||= {};
        $d->{"$o/$r"} = \%attrs;
        return ($d, 1);
    });
}

# api_fault($method, $path_re, %answer): see the header; none: cleared
sub api_fault {
    my ($self, $method, $re, %a) = @_;
    $self->_state_update('faults.json', sub {
        my ($d) = @_;
        $d = [] unless defined $method;
        push @$d, { method => $method, re => $re, %a } if defined $method;
        return ($d, 1);
    });
}

# reject_pushes('o/r', $message): the bare repository's pre-receive hook
sub reject_pushes {
    my ($self, $name, $msg) = @_;
    my $hook = $self->repo_path($name) . '/hooks/pre-receive';
    unlink $hook;
    return unless defined $msg;
    open(my $fh, '>', $hook) or die "$hook: $!";
    (my $q = $msg) =~ s/'/'\\''/g;
    print $fh "#!/bin/sh\necho '$q' >&2\nexit 1\n";
    close $fh;
    chmod 0755, $hook;
}

# delayed -> "METHOD PATH" of each request an api_fault delay => held
sub delayed {
    my ($self) = @_;
    open(my $fh, '<', "$self->{dir}/delayed") or return ();
    chomp(my @l = <$fh>);
    return @l;
}

# pulls('owner/repo') -> list of the pull requests created (oldest first)
sub pulls {
    my ($self, $name) = @_;
    my ($o, $r) = _split_repo($name);
    my $d = $self->_state_read('pulls.json') || {};
    my @p = @{ $d->{"$o/$r"} || [] };
    return wantarray ? @p : \@p;
}

##############################################################################
# git helpers (run in the test process)

my %GIT_ENV = (
    GIT_CONFIG_NOSYSTEM => 1, GIT_CONFIG_GLOBAL => '/dev/null',
    GIT_AUTHOR_NAME => 'Fake GitHub', GIT_AUTHOR_EMAIL => 'fake@github.invalid',
    GIT_COMMITTER_NAME => 'Fake GitHub', GIT_COMMITTER_EMAIL => 'fake@github.invalid',
    GIT_TERMINAL_PROMPT => 0,
);

# _git(\%env, @args) -> stdout (chomped); dies on failure unless $env->{_try}
sub _git {
    my ($self, $env, @args) = @_;
    my %env = %{ $env || {} };
    my $try = delete $env{_try};
    my $errf = "$self->{dir}/git-helper.err";
    my $pid = open(my $fh, '-|');
    die "fork: $!" unless defined $pid;
    if (!$pid) {
        %ENV = (%ENV, %GIT_ENV, %env);
        delete $ENV{$_} for qw(GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE);
        $ENV{$_} = $env{$_} for grep { /^GIT_(DIR|WORK_TREE|INDEX_FILE)$/ } keys %env;
        open(STDIN, '<', '/dev/null');
        open(STDERR, '>', $errf);
        exec('git', @args) or POSIX::_exit(127);
    }
    binmode $fh;
    local $/;
    my $out = <$fh>;
    close $fh;
    my $rc = $?;
    $out //= '';
    if ($rc) {
        return undef if $try;
        my $err = '';
        if (open(my $ef, '<', $errf)) { local $/; $err = <$ef> // ''; close $ef }
        die "SMCP::Fakes: git @args failed ($rc): $err";
    }
    return $out;
}

sub _git_line {
    my $out = _git(@_);
    return undef unless defined $out;
    $out =~ s/\s+\z//;
    return $out;
}

# create_repo('owner/repo', files => {path => content}, branch => 'main',
#             message => 'Initial commit', empty => 1 (no commit))
# -> the initial commit's sha (undef for an empty repository)
sub create_repo {
    my ($self, $name, %o) = @_;
    my $gd = $self->repo_path($name);
    die "SMCP::Fakes: repository $gd exists\n" if -e $gd;
    make_path(dirname($gd));
    my $branch = $o{branch} // $self->{default_branch} // 'main';
    $self->_git({}, 'init', '-q', '--bare', "--initial-branch=$branch", $gd);
    $self->_git({}, '--git-dir', $gd, 'config', 'http.receivepack', 'true');
    return undef if $o{empty};
    my (undef, $r) = _split_repo($name);
    return $self->commit_files($name, branch => $branch,
        files => $o{files} // { 'README.md' => "# $r\n" },
        message => $o{message} // 'Initial commit');
}

# commit_files('owner/repo', branch => 'main', files => {path => content
# (undef deletes)}, message => '...', from => 'main', orphan => 1)
# -> new commit sha; a commit made "upstream" on top of the branch; a new
# branch starts at `from` (default HEAD), or as a root commit with orphan
sub commit_files {
    my ($self, $name, %o) = @_;
    my $gd = $self->repo_path($name);
    die "SMCP::Fakes: no repository $gd\n" unless -d $gd;
    my $branch = $o{branch} // 'main';
    my $ref = $branch =~ m{^refs/} ? $branch : "refs/heads/$branch";
    my $work = tempdir('commit-XXXXXX', DIR => $self->{dir}, CLEANUP => 0);
    my %env = (GIT_DIR => $gd, GIT_WORK_TREE => $work,
               GIT_INDEX_FILE => "$work.index");
    my $parent = _git_line($self, { %env, _try => 1 }, 'rev-parse', '--verify',
                           '-q', "$ref^{commit}");
    $parent = undef if defined $parent && $parent eq '';
    if (!$parent && !$o{orphan}) {
        # a new branch starts at `from` (default: the repository's HEAD)
        $parent = _git_line($self, { %env, _try => 1 }, 'rev-parse', '--verify',
                            '-q', _full_ref($o{from} // 'HEAD') . '^{commit}');
        $parent = undef if defined $parent && $parent eq '';
    }
    $self->_git(\%env, 'read-tree', $parent ? $parent : '--empty');
    my (@add, @del);
    my $files = $o{files} || {};
    for my $path (sort keys %$files) {
        my $content = $files->{$path};
        if (!defined $content) { push @del, $path; next }
        my $f = "$work/$path";
        make_path(dirname($f));
        open(my $fh, '>', $f) or die "write $f: $!";
        binmode $fh;
        utf8::encode($content) if utf8::is_utf8($content);
        print $fh $content;
        close $fh;
        push @add, $path;
    }
    $self->_git(\%env, 'add', '-f', '--', @add) if @add;
    $self->_git(\%env, 'rm', '--cached', '-q', '--ignore-unmatch', '--', @del) if @del;
    my $tree = _git_line($self, \%env, 'write-tree');
    my $commit = _git_line($self, \%env, 'commit-tree', $tree,
                           ($parent ? ('-p', $parent) : ()),
                           '-m', $o{message} // 'Update files');
    $self->_git(\%env, 'update-ref', $ref, $commit);
    remove_tree($work);
    unlink "$work.index";
    return $commit;
}

sub _full_ref {
    my ($ref) = @_;
    $ref //= 'main';
    return $ref if $ref =~ m{^refs/} || $ref =~ /^[0-9a-f]{40}$/ || $ref eq 'HEAD';
    return "refs/heads/$ref";
}

# ref_commit('owner/repo', 'main' | 'refs/heads/x' | 'refs/tags/v1') -> sha|undef
sub ref_commit {
    my ($self, $name, $ref) = @_;
    my $gd = $self->repo_path($name);
    return undef unless -d $gd;
    my $s = _git_line($self, { GIT_DIR => $gd, _try => 1 }, 'rev-parse',
                      '--verify', '-q', _full_ref($ref) . '^{commit}');
    return defined $s && length $s ? $s : undef;
}

# file_content('owner/repo', 'main', 'path/in/repo') -> bytes | undef
sub file_content {
    my ($self, $name, $ref, $path) = @_;
    my $gd = $self->repo_path($name);
    return undef unless -d $gd;
    my $sha = $self->ref_commit($name, $ref) or return undef;
    return $self->_git({ GIT_DIR => $gd, _try => 1 }, 'cat-file', 'blob', "$sha:$path");
}

# commit_message('owner/repo', 'main') -> full message (trailing newlines removed)
sub commit_message {
    my ($self, $name, $ref) = @_;
    my $gd = $self->repo_path($name);
    my $sha = $self->ref_commit($name, $ref) or return undef;
    return _git_line($self, { GIT_DIR => $gd }, 'log', '-1', '--format=%B', $sha);
}

# files('owner/repo', 'main') -> sorted list of paths in the commit's tree
sub files {
    my ($self, $name, $ref) = @_;
    my $gd = $self->repo_path($name);
    my $sha = $self->ref_commit($name, $ref) or return ();
    my $out = $self->_git({ GIT_DIR => $gd }, 'ls-tree', '-r', '--name-only', $sha);
    return sort split /\n/, $out;
}

# refs('owner/repo') -> { 'refs/heads/main' => sha, ... }
sub refs {
    my ($self, $name) = @_;
    my $gd = $self->repo_path($name);
    return {} unless -d $gd;
    my $out = $self->_git({ GIT_DIR => $gd }, 'for-each-ref',
                          '--format=%(objectname) %(refname)');
    my %r = map { my ($s, $n) = split / /, $_, 2; ($n => $s) } split /\n/, $out;
    return \%r;
}

##############################################################################
# request handling (in the connection child)

sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    if ($self->{serve_api}) {
        my $ap = $p;
        $ap =~ s{^/api/v3(?=/)}{};
        if ($ap =~ m{^/(repos|user|rate_limit)(/|$)} || !$self->{serve_git}) {
            return $self->_api($req, $c, $ap);
        }
    }
    if ($self->{serve_git} && $p =~ m{^/([^/]+)/([^/]+)(/.*)$}) {
        return $self->_git_request($req, $c, $1, $2, $3);
    }
    return $self->_reply($c, $req, 404, ['Content-Type' => 'text/plain'], "Not Found\n");
}

sub _unescape {
    my ($s) = @_;
    $s =~ s/%([0-9A-Fa-f]{2})/chr(hex $1)/ge;
    return $s;
}

sub _basic_auth {
    my ($h) = @_;
    return () unless defined $h && $h =~ /^Basic\s+(\S+)\s*$/i;
    my $d = decode_base64($1);
    my ($u, $p) = split /:/, $d, 2;
    return ($u, $p);
}

sub _git_request {
    my ($self, $req, $c, $owner, $repo, $rest) = @_;
    ($owner, $repo, $rest) = map { _unescape($_) } ($owner, $repo, $rest);
    my $q = $req->{query} // '';
    my $service = $q =~ /(?:^|&)service=(git-[a-z-]+)/ ? $1
                : $rest =~ m{^/(git-(?:upload|receive)-pack)$} ? $1 : undef;
    my %lx = (repo => "$owner/" . ($repo =~ s/\.git$//r), service => $service);
    unless ($rest =~ m{^/(?:info/refs|git-upload-pack|git-receive-pack|HEAD|objects/[\w./-]+)$}
            && $owner !~ /^\.\.?$/ && $repo !~ /^\.\.?$/) {
        return $self->_reply($c, $req, 404, ['Content-Type' => 'text/plain'],
                             "Not Found\n", log => \%lx);
    }
    my ($user, $pass) = _basic_auth($req->{headers}{authorization});
    my $ok = defined $pass && defined $self->{git_token} && $pass eq $self->{git_token}
             && (!defined $self->{user} || $user eq $self->{user});
    $lx{auth} = $ok ? 'ok' : defined $pass ? 'bad' : 'missing';
    if (!$ok && $self->{anonymous_read} && ($service // '') ne 'git-receive-pack') {
        $ok = 1;
        $user = undef;
    }
    unless ($ok) {
        return $self->_reply($c, $req, 401,
            ['Content-Type' => 'text/plain; charset=UTF-8',
             'WWW-Authenticate' => 'Basic realm="GitHub"'],
            "Invalid username or token. Password authentication is not supported for Git operations.\n",
            log => \%lx);
    }
    my $dir = $repo;
    $dir .= '.git' if $dir !~ /\.git$/ && -d "$self->{root}/$owner/$dir.git";
    unless (-d "$self->{root}/$owner/$dir") {
        return $self->_reply($c, $req, 404, ['Content-Type' => 'text/plain; charset=UTF-8'],
                             "Repository not found.\n", log => \%lx);
    }
    return $self->_cgi($req, $c, "/$owner/$dir$rest", $user, \%lx);
}

# run git http-backend for one request and relay its answer
sub _cgi {
    my ($self, $req, $c, $path_info, $user, $lx) = @_;
    my $bodyf = "$self->{dir}/cgi-body.$$.$req->{seq}";
    open(my $bf, '>', $bodyf) or die "write $bodyf: $!";
    binmode $bf;
    print $bf $req->{body};
    close $bf;

    my %env = (
        PATH => $ENV{PATH} // '/usr/local/bin:/usr/bin:/bin',
        HOME => $self->{dir},
        GIT_CONFIG_NOSYSTEM => 1, GIT_CONFIG_GLOBAL => '/dev/null',
        GIT_PROJECT_ROOT => $self->{root}, GIT_HTTP_EXPORT_ALL => 1,
        GATEWAY_INTERFACE => 'CGI/1.1', SERVER_PROTOCOL => "HTTP/$req->{version}",
        SERVER_SOFTWARE => "smcp-fake-$self->{kind}", SERVER_NAME => $self->{addr},
        SERVER_PORT => $self->{port}, REMOTE_ADDR => $req->{peer} // '127.0.0.1',
        REQUEST_METHOD => $req->{method}, SCRIPT_NAME => '',
        PATH_INFO => $path_info, QUERY_STRING => $req->{query} // '',
        REQUEST_URI => $req->{target},
    );
    if (defined $user) { $env{REMOTE_USER} = $user; $env{AUTH_TYPE} = 'Basic' }
    my $h = $req->{headers};
    $env{CONTENT_TYPE} = $h->{'content-type'} if defined $h->{'content-type'};
    $env{CONTENT_LENGTH} = length $req->{body}
        if $req->{method} eq 'POST' || length $req->{body};
    for my $k (keys %$h) {
        next if $k =~ /^(authorization|content-type|content-length|transfer-encoding|connection|expect|te|trailer|upgrade|proxy-.*)$/;
        (my $e = uc $k) =~ s/-/_/g;
        $env{"HTTP_$e"} = $h->{$k};
    }

    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        close $rd;
        open(STDIN, '<', $bodyf) or POSIX::_exit(126);
        open(STDOUT, '>&', $wr) or POSIX::_exit(126);
        open(STDERR, '>>', "$self->{dir}/git-http-backend.log");
        %ENV = %env;
        exec('git', 'http-backend') or POSIX::_exit(127);
    }
    close $wr;
    binmode $rd;
    local $SIG{TERM} = sub { kill 'TERM', $pid; unlink $bodyf; POSIX::_exit(1) };

    my $buf = '';
    my $hend;
    while (1) {
        if ($buf =~ /\r?\n\r?\n/) { $hend = $+[0]; last }
        my $n = sysread($rd, $buf, 65536, length $buf);
        last unless $n;
    }
    my $keep;
    if (!defined $hend) {
        waitpid($pid, 0);
        my $rc = $?;
        unlink $bodyf;
        return $self->_reply($c, $req, 500, ['Content-Type' => 'text/plain'],
                             "git http-backend failed ($rc)\n",
                             log => { %$lx, cgi_exit => $rc });
    }
    my $head = substr($buf, 0, $hend);
    my $rest = substr($buf, $hend);
    my $status = 200;
    my @hdrs;
    for my $l (split /\r?\n/, $head) {
        my ($k, $v) = $l =~ /^([^:]+):\s*(.*)$/ or next;
        if (lc $k eq 'status') { ($status) = $v =~ /^(\d{3})/; $status //= 500; next }
        $status = 302 if lc $k eq 'location' && $status == 200;
        push @hdrs, $k => $v;
    }
    my $s = $self->_stream_begin($c, $req, $status, \@hdrs, log => $lx);
    SMCP::Fakes::Server::_stream_write($s, $rest) if length $rest;
    while (1) {
        my $n = sysread($rd, my $chunk, 65536);
        last unless $n;
        SMCP::Fakes::Server::_stream_write($s, $chunk) or last;
    }
    close $rd;
    waitpid($pid, 0);
    unlink $bodyf;
    return SMCP::Fakes::Server::_stream_end($s, $req->{keep_alive});
}

##############################################################################
# REST

sub _now_iso { return POSIX::strftime('%Y-%m-%dT%H:%M:%SZ', gmtime()) }

sub _num_id { return hex(substr(sha1_hex($_[0]), 0, 7)) }

sub _gh_json {
    my ($self, $c, $req, $status, $data, $hdrs, %o) = @_;
    return $self->_reply($c, $req, $status,
        ['Content-Type' => 'application/json; charset=utf-8',
         'X-GitHub-Media-Type' => 'github.v3; format=json',
         'X-GitHub-Request-Id' => uc(SMCP::Fakes::Server::_rand_id(8)),
         'X-RateLimit-Limit' => 5000, 'X-RateLimit-Remaining' => 4999,
         'X-RateLimit-Resource' => 'core',
         @{ $hdrs || [] }],
        $SMCP::Fakes::Server::JSON->encode($data), %o);
}

sub _gh_error {
    my ($self, $c, $req, $status, $msg, %x) = @_;
    my $lx = delete $x{log};
    return $self->_gh_json($c, $req, $status,
        { message => $msg, documentation_url => 'https://docs.github.com/rest',
          status => "$status", %x }, undef, log => $lx);
}

# {owner, name, full_name, default_branch, private, git_dir} or undef
sub _repo_info {
    my ($self, $o, $r) = @_;
    my $known = $self->_state_read('repos.json') || {};
    my $attrs = $known->{"$o/$r"};
    my $gd = "$self->{root}/$o/$r.git";
    $gd = undef unless -d $gd;
    return undef unless $attrs || $gd;
    $attrs ||= {};
    my $def = $attrs->{default_branch};
    if (!defined $def && $gd) {
        my $head = _git_line($self, { GIT_DIR => $gd, _try => 1 },
                             'symbolic-ref', '-q', 'HEAD');
        $def = $1 if defined $head && $head =~ m{^refs/heads/(.+)$};
    }
    return { owner => $o, name => $r, full_name => "$o/$r",
             default_branch => $def // $self->{default_branch} // 'main',
             private => $attrs->{private} ? 1 : 0, git_dir => $gd };
}

sub _repo_json {
    my ($self, $info) = @_;
    my ($o, $r) = @$info{qw(owner name)};
    my $web = $self->{web_base};
    my $clone = $self->{clone_base} // $web;
    my $T = JSON::PP::true;
    my $F = JSON::PP::false;
    return {
        id => _num_id("$o/$r"), node_id => 'R_' . substr(sha1_hex("$o/$r"), 0, 16),
        name => $r, full_name => "$o/$r",
        private => $info->{private} ? $T : $F,
        visibility => $info->{private} ? 'private' : 'public',
        owner => { login => $o, id => _num_id($o), type => 'User',
                   html_url => "$web/$o", url => "$self->{api_base}/users/$o" },
        html_url => "$web/$o/$r", description => undef, fork => $F,
        url => "$self->{api_base}/repos/$o/$r",
        clone_url => "$clone/$o/$r.git", git_url => "git://github.com/$o/$r.git",
        ssh_url => "git\@github.com:$o/$r.git",
        default_branch => $info->{default_branch},
        archived => $F, disabled => $F,
        permissions => { admin => $F, maintain => $F, push => $T, triage => $T, pull => $T },
        created_at => '2024-01-01T00:00:00Z', updated_at => _now_iso(),
        pushed_at => _now_iso(),
    };
}

sub _api {
    my ($self, $req, $c, $p) = @_;
    my $m = $req->{method};
    my ($tok) = ($req->{headers}{authorization} // '') =~ /^(?:Bearer|token)\s+(\S+)\s*$/i;
    unless (defined $tok && defined $self->{api_token} && $tok eq $self->{api_token}) {
        return $self->_gh_error($c, $req, 401, 'Bad credentials',
                                log => { auth => defined $tok ? 'bad' : 'missing' });
    }
    local $self->{_answer_instead};
    for my $f (@{ $self->_state_read('faults.json') || [] }) {
        next unless $f->{method} eq $m && $p =~ /$f->{re}/;
        if ($f->{delay}) {
            if (open(my $fh, '>>', "$self->{dir}/delayed")) {
                flock($fh, Fcntl::LOCK_EX);
                print $fh "$m $p\n";
                close $fh;
            }
            sleep($f->{delay});
            last;
        }
        if ($f->{apply}) {
            $self->{_answer_instead} = $f;
            last;
        }
        return $self->_reply($c, $req, $f->{status} // 502,
            ['Content-Type' => $f->{content_type} // 'application/json'],
            $f->{body} // '', log => { fault => 1 });
    }
    if ($p eq '/user' && ($m eq 'GET' || $m eq 'HEAD')) {
        return $self->_gh_json($c, $req, 200, { login => $self->{login},
            id => _num_id($self->{login}), type => 'User',
            html_url => "$self->{web_base}/$self->{login}" });
    }
    if ($p eq '/rate_limit') {
        return $self->_gh_json($c, $req, 200, { resources => { core => {
            limit => 5000, remaining => 4999, reset => time() + 3600, used => 1 } } });
    }
    my ($o, $r, $rest) = $p =~ m{^/repos/([^/]+)/([^/]+?)(?:\.git)?(/.*)?$}
        or return $self->_gh_error($c, $req, 404, 'Not Found');
    $rest //= '';
    $rest =~ s{/$}{};
    my %lx = (repo => "$o/$r");
    my $info = $self->_repo_info($o, $r)
        or return $self->_gh_error($c, $req, 404, 'Not Found', log => \%lx);
    if ($rest eq '' && ($m eq 'GET' || $m eq 'HEAD')) {
        return $self->_gh_json($c, $req, 200, $self->_repo_json($info), undef, log => \%lx);
    }
    if ($rest eq '/pulls' && ($m eq 'GET' || $m eq 'HEAD')) {
        my %q = map { my ($k, $v) = split /=/, $_, 2; (_unescape($k) => _unescape($v // '')) }
                split /&/, ($req->{query} // '');
        my $state = $q{state} // 'open';
        my @p = $self->pulls("$o/$r");
        @p = grep { $_->{state} eq $state } @p unless $state eq 'all';
        @p = grep { $_->{head}{label} eq $q{head} || $_->{head}{ref} eq $q{head} } @p
            if defined $q{head} && length $q{head};
        @p = grep { $_->{base}{ref} eq $q{base} } @p if defined $q{base} && length $q{base};
        return $self->_gh_json($c, $req, 200, \@p, undef, log => \%lx);
    }
    if ($rest eq '/pulls' && $m eq 'POST') {
        return $self->_create_pull($req, $c, $info, \%lx);
    }
    if ($rest =~ m{^/pulls/(\d+)$} && ($m eq 'GET' || $m eq 'HEAD')) {
        my ($pr) = grep { $_->{number} == $1 } $self->pulls("$o/$r");
        return $pr ? $self->_gh_json($c, $req, 200, $pr, undef, log => \%lx)
                   : $self->_gh_error($c, $req, 404, 'Not Found', log => \%lx);
    }
    return $self->_gh_error($c, $req, 404, 'Not Found', log => \%lx);
}

sub _create_pull {
    my ($self, $req, $c, $info, $lx) = @_;
    my $j = $req->{json};
    return $self->_gh_error($c, $req, 400, 'Problems parsing JSON', log => $lx)
        unless ref $j eq 'HASH';
    my ($o, $r) = @$info{qw(owner name)};
    my @missing = grep { !defined $j->{$_} || ref $j->{$_} || $j->{$_} eq '' } qw(title head base);
    if (@missing) {
        return $self->_gh_error($c, $req, 422, 'Validation Failed', log => $lx,
            errors => [ map { { resource => 'PullRequest', field => $_,
                                code => 'missing_field' } } @missing ]);
    }
    my ($head_owner, $head_ref) = $j->{head} =~ /^([^:]+):(.+)$/ ? ($1, $2) : ($o, $j->{head});
    my $base_ref = $j->{base};
    my ($head_sha, $base_sha);
    if ($info->{git_dir}) {
        my $gd = $info->{git_dir};
        $head_sha = _git_line($self, { GIT_DIR => $gd, _try => 1 }, 'rev-parse',
                              '--verify', '-q', "refs/heads/$head_ref^{commit}");
        $base_sha = _git_line($self, { GIT_DIR => $gd, _try => 1 }, 'rev-parse',
                              '--verify', '-q', "refs/heads/$base_ref^{commit}");
        my @bad;
        push @bad, 'head' unless $head_sha;
        push @bad, 'base' unless $base_sha;
        if (@bad) {
            return $self->_gh_error($c, $req, 422, 'Validation Failed', log => $lx,
                errors => [ map { { resource => 'PullRequest', field => $_,
                                    code => 'invalid' } } @bad ]);
        }
        if ($head_sha eq $base_sha) {
            return $self->_gh_error($c, $req, 422, 'Validation Failed', log => $lx,
                errors => [ { resource => 'PullRequest', code => 'custom',
                              message => "No commits between $base_ref and $head_ref" } ]);
        }
    }
    $head_sha ||= sha1_hex("head:$o/$r:$head_ref");
    $base_sha ||= sha1_hex("base:$o/$r:$base_ref");
    my $web = $self->{web_base};
    my $api = "$self->{api_base}/repos/$o/$r";
    my $repo_min = { id => _num_id("$o/$r"), name => $r, full_name => "$o/$r",
                     html_url => "$web/$o/$r", clone_url => "$web/$o/$r.git",
                     default_branch => $info->{default_branch},
                     owner => { login => $o, type => 'User' } };
    my $T = JSON::PP::true;
    my $F = JSON::PP::false;
    my $dup;
    my $pr = $self->_state_update('pulls.json', sub {
        my ($d) = @_;
        $d ||= {};
        my $list = $d->{"$o/$r"} ||= [];
        ($dup) = grep { $_->{state} eq 'open' && $_->{head}{label} eq "$head_owner:$head_ref"
                        && $_->{base}{ref} eq $base_ref } @$list;
        return ($d, undef) if $dup;
        my $n = 1;
        for (@$list) { $n = $_->{number} + 1 if $_->{number} >= $n }
        my $now = _now_iso();
        my $new = {
            url => "$api/pulls/$n", id => 1_000_000 + _num_id("$o/$r#$n") % 1_000_000,
            node_id => 'PR_' . substr(sha1_hex("$o/$r#$n"), 0, 16),
            html_url => "$web/$o/$r/pull/$n", diff_url => "$web/$o/$r/pull/$n.diff",
            patch_url => "$web/$o/$r/pull/$n.patch", issue_url => "$api/issues/$n",
            number => $n, state => 'open', locked => $F,
            title => $j->{title}, body => $j->{body},
            draft => $j->{draft} ? $T : $F,
            user => { login => $self->{login}, type => 'User' },
            head => { label => "$head_owner:$head_ref", ref => $head_ref,
                      sha => $head_sha, repo => $repo_min,
                      user => { login => $head_owner } },
            base => { label => "$o:$base_ref", ref => $base_ref, sha => $base_sha,
                      repo => $repo_min, user => { login => $o } },
            maintainer_can_modify => ($j->{maintainer_can_modify} // 1) ? $T : $F,
            merged => $F, mergeable => undef, merged_at => undef, closed_at => undef,
            created_at => $now, updated_at => $now,
        };
        push @$list, $new;
        return ($d, $new);
    });
    if ($dup) {
        return $self->_gh_error($c, $req, 422, 'Validation Failed', log => $lx,
            errors => [ { resource => 'PullRequest', code => 'custom',
                          message => "A pull request already exists for $head_owner:$head_ref." } ]);
    }
    return $self->_gh_json($c, $req, 201, $pr, ['Location' => $pr->{url}],
                           log => { %$lx, number => $pr->{number} });
}


package SMCP::Fakes::GitHubOAuth;

use strict;
use warnings;
use Digest::SHA qw(sha1);
our @ISA = ('SMCP::Fakes::Server');

sub _defaults {
    return (kind => 'github-oauth', client_id => 'gh-client',
            client_secret => 'gh-secret', login => 'octo-alice', orgs => {},
            ids => {}, org_ids => {}, deny => 0, fail => 0);
}

sub _init {
    my ($self) = @_;
    $self->_state_write('oauth.json', { codes => {}, tokens => {} });
    $self->set();
}

# ->set(login => .., deny => .., orgs => {...}, ids => {...}, fail => ..)
sub set {
    my ($self, %o) = @_;
    $self->{$_} = $o{$_} for keys %o;
    $self->_state_write('config.json',
        { map { $_ => $self->{$_} } qw(login orgs ids org_ids deny fail) });
}

# a number made from a name: the same every time, different names apart
sub _made_id {
    my ($name, $base) = @_;
    return $base + unpack('N', sha1(lc $name)) % 900_000;
}

# the numeric id of a login now
sub id {
    my ($self, $login) = @_;
    return $self->{ids}{$login} // _made_id($login, 1000);
}

# ->rename(OLD, NEW): the same user (id, organizations), another login
sub rename {
    my ($self, $old, $new) = @_;
    my %ids = %{ $self->{ids} };
    my %orgs = %{ $self->{orgs} };
    $ids{$new} = $self->id($old);
    $ids{$old} = -1;                        # nobody holds OLD any more
    $orgs{$new} = delete $orgs{$old} if $orgs{$old};
    $self->set(ids => \%ids, orgs => \%orgs);
}

sub _params {
    my ($s) = @_;
    my %p;
    for (split /&/, $s // '') {
        my ($k, $v) = split /=/, $_, 2;
        ($k, $v) = map { my $x = $_ // ''; $x =~ tr/+/ /;
                         $x =~ s/%([0-9A-Fa-f]{2})/chr(hex $1)/ge; $x } ($k, $v);
        $p{$k} = $v;
    }
    return %p;
}

sub _esc {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9\-._~])/sprintf('%%%02X', ord($1))/ge;
    return $s;
}

sub _handle {
    my ($self, $req, $c) = @_;
    my ($m, $p) = @$req{qw(method path)};
    my %q = _params($req->{query});
    my $cfg = $self->_state_read('config.json');
    my $st = $self->_state_read('oauth.json');
    my $id_of = sub { $cfg->{ids}{ $_[0] } // _made_id($_[0], 1000) };

    if ($p eq '/login/oauth/authorize' && $m eq 'GET') {
        return $self->_reply($c, $req, 404, ['Content-Type' => 'text/plain'], "no such app\n")
            unless ($q{client_id} // '') eq $self->{client_id} && $q{redirect_uri};
        my $sep = $q{redirect_uri} =~ /\?/ ? '&' : '?';
        if ($cfg->{deny}) {
            return $self->_reply($c, $req, 302, [ Location => "$q{redirect_uri}${sep}"
                . "error=access_denied&state=" . _esc($q{state} // '') ], '');
        }
        my $code = 'ghc_' . SMCP::Fakes::Server::_rand_id(20);
        $st->{codes}{$code} = { id => $id_of->($cfg->{login}),
                                redirect_uri => $q{redirect_uri}, scope => $q{scope} // '' };
        $st->{logins}{ $cfg->{login} } = 1;
        $self->_state_write('oauth.json', $st);
        return $self->_reply($c, $req, 302, [ Location => "$q{redirect_uri}${sep}code="
            . _esc($code) . '&state=' . _esc($q{state} // '') ], '');
    }
    if ($p eq '/login/oauth/access_token' && $m eq 'POST') {
        my %f = (%q, _params($req->{body}));
        my $json = ($req->{headers}{accept} // '') =~ m{application/json};
        my $answer = sub {
            my ($data) = @_;
            return $self->_json_reply($c, $req, 200, $data) if $json;
            return $self->_reply($c, $req, 200,
                ['Content-Type' => 'application/x-www-form-urlencoded'],
                join('&', map { "$_=" . _esc($data->{$_}) } sort keys %$data));
        };
        if (($f{client_id} // '') ne $self->{client_id}
            || ($f{client_secret} // '') ne $self->{client_secret}) {
            return $answer->({ error => 'incorrect_client_credentials' });
        }
        my $code = $st->{codes}{ $f{code} // '' };
        if (!$code || $code->{used}
            || (defined $f{redirect_uri} && $f{redirect_uri} ne $code->{redirect_uri})) {
            return $answer->({ error => 'bad_verification_code' });
        }
        $code->{used} = 1;
        my $tok = 'gho_' . SMCP::Fakes::Server::_rand_id(36);
        $st->{tokens}{$tok} = $code->{id};
        $self->_state_write('oauth.json', $st);
        return $answer->({ access_token => $tok, token_type => 'bearer',
                           scope => $code->{scope} });
    }
    if (($p eq '/user' || $p eq '/user/orgs') && $m eq 'GET') {
        return $self->_json_reply($c, $req, 503, { message => 'Service unavailable' })
            if $cfg->{fail};
        my ($tok) = ($req->{headers}{authorization} // '') =~ /^(?:Bearer|token)\s+(\S+)$/i;
        my $id = defined $tok ? $st->{tokens}{$tok} : undef;
        my ($login) = defined $id
            ? grep { $id_of->($_) == $id } sort(keys %{ $cfg->{ids} }, $cfg->{login},
                                                keys %{ $cfg->{orgs} },
                                                keys %{ $st->{logins} || {} })
            : ();
        return $self->_json_reply($c, $req, 401, { message => 'Bad credentials' })
            unless defined $login;
        return $self->_json_reply($c, $req, 200, { login => $login, id => $id + 0 })
            if $p eq '/user';
        return $self->_json_reply($c, $req, 200,
            [ map { { login => $_, id => $cfg->{org_ids}{$_} // _made_id($_, 9_000_000) } }
              @{ $cfg->{orgs}{$login} || [] } ]);
    }
    return $self->_reply($c, $req, 404, ['Content-Type' => 'text/plain'], "Not Found\n");
}


package SMCP::Fakes::Static;

use strict;
use warnings;
our @ISA = ('SMCP::Fakes::Server');

my %TYPES = (html => 'text/html', json => 'application/json',
             txt => 'text/plain', info => 'application/json',
             mod => 'text/plain; charset=utf-8', zip => 'application/zip',
             whl => 'application/octet-stream',
             tgz => 'application/octet-stream',
             gz => 'application/octet-stream');

sub _defaults { return (kind => 'static', files => {}) }

# artifactory => 1: what a registry on Tomcat or Jetty (Artifactory,
# Nexus) does with what a client sends: a path segment's ";parameters"
# are dropped and "..;" is "..", resolved before the file is looked up;
# URLs of itself in what it serves are built from X-Forwarded-Proto/Host
# or X-Artifactory-Override-Base-Url; and "Accept: text/html" gets an
# HTML page in place of the JSON
sub _tomcat_path {
    my ($path) = @_;
    my @out;
    for my $seg (split m{/}, $path, -1) {
        $seg =~ s/;.*//s;
        if ($seg eq '..') { pop @out if @out > 1 }
        elsif ($seg ne '.') { push @out, $seg }
    }
    return join('/', @out) || '/';
}

sub _forwarded_body {
    my ($self, $req, $body) = @_;
    my $h = $req->{headers};
    my $base = $h->{'x-artifactory-override-base-url'};
    $base //= ($h->{'x-forwarded-proto'} // 'http') . "://$h->{'x-forwarded-host'}"
        if defined $h->{'x-forwarded-host'};
    my $self_url = $self->url;
    $body =~ s{\Q$self_url\E}{$base}g if defined $base;
    return $body;
}

sub _init {
    my ($self) = @_;
    $self->_state_write('files.json', $self->{files});
}

sub set_file {
    my ($self, $path, $file) = @_;
    my $files = $self->_state_read('files.json') // {};
    if (defined $file) { $files->{$path} = $file } else { delete $files->{$path} }
    $self->_state_write('files.json', $files);
}

sub _handle {
    my ($self, $req, $c) = @_;
    my $h = $self->{headers} || [];
    if ($req->{method} !~ /^(GET|HEAD)$/) {
        return $self->_reply($c, $req, 405, [Allow => 'GET, HEAD', @$h], "no\n");
    }
    if ($self->{artifactory}) {
        $req = { %$req, path => _tomcat_path($req->{path}) };
        return $self->_reply($c, $req, 200, ['Content-Type' => 'text/html', @$h],
                             "<html>the HTML variant</html>\n")
            if ($req->{headers}{accept} // '') =~ m{text/html};
    }
    my $f = ($self->_state_read('files.json') // {})->{ $req->{path} };
    if (defined $f) {
        my ($status, $body, $type) = ref $f eq 'ARRAY' ? @$f : (200, $f);
        return $self->_reply($c, $req, $status,
                             ['Content-Type' => $type // 'application/json', @$h], $body);
    }
    return $self->_dir_file($req, $c) if defined $self->{root};
    return $self->_reply($c, $req, 404, ['Content-Type' => 'text/plain', @$h], "Not Found\n");
}

# a file under root, its type by its extension
sub _dir_file {
    my ($self, $req, $c) = @_;
    my $h = $self->{headers} || [];
    my $p = $req->{path};
    $p =~ s{%([0-9A-Fa-f]{2})}{chr hex $1}ge;
    return $self->_reply($c, $req, 404, $h, "Not Found\n")
        if $p =~ m{(^|/)\.\.(/|$)} || $p !~ m{^/};
    my $f = "$self->{root}$p";
    $f =~ s{/+$}{};
    $f .= -e "$f/index.html" ? '/index.html' : '/index.json' if -d $f;
    open(my $fh, '<:raw', $f) or return $self->_reply($c, $req, 404, $h, "Not Found\n");
    local $/;
    my $body = <$fh>;
    close $fh;
    my ($ext) = $f =~ /\.([A-Za-z0-9]+)$/;
    my $type = ($self->{types} || {})->{$ext // ''} // $TYPES{$ext // ''}
             // 'application/octet-stream';
    $body = $self->_forwarded_body($req, $body) if $self->{artifactory};
    return $self->_reply($c, $req, 200, ['Content-Type' => $type, @$h], $body);
}

1;
