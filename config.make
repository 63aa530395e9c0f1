# Sourced by nginx's configure (auto/make) after it wrote its Makefile:
# the rules that make the module's generated headers (see `config`).
# smcp-embed is built with the build's compiler and jansson; its inputs are
# listed as wildcards, so a new script, tool or page needs no new configure
# (scripts include the libraries of common/scripts/lib/, pages are laid
# out on the layouts of ui/layouts/ and oauth/layouts/).

SMCP_EMBED_SRC="$ngx_addon_dir/ngx_sandbox_mcp_module/common/embed/smcp_embed.c"
SMCP_SCRIPTS_DIR="$ngx_addon_dir/ngx_sandbox_mcp_module/common/scripts"
SMCP_TOOLS_DIR="$ngx_addon_dir/ngx_sandbox_mcp_module/tools"
SMCP_UI_DIR="$ngx_addon_dir/ngx_sandbox_mcp_module/ui"
SMCP_OAUTH_DIR="$ngx_addon_dir/ngx_sandbox_mcp_module/oauth"

cat << END                                                  >> $NGX_MAKEFILE

$NGX_OBJS/smcp-embed:	$SMCP_EMBED_SRC
	\$(CC) -o $NGX_OBJS/smcp-embed $SMCP_EMBED_SRC -ljansson

$NGX_OBJS/ngx_http_sandbox_mcp_lua.h:	$NGX_OBJS/smcp-embed \\
		$SMCP_SCRIPTS_DIR $SMCP_SCRIPTS_DIR/*.lua \\
		$SMCP_SCRIPTS_DIR/lib $SMCP_SCRIPTS_DIR/lib/*.lua
	$NGX_OBJS/smcp-embed lua $NGX_OBJS/ngx_http_sandbox_mcp_lua.h \\
		$SMCP_SCRIPTS_DIR

$NGX_OBJS/ngx_http_sandbox_mcp_tools_json.h:	$NGX_OBJS/smcp-embed \\
		$SMCP_TOOLS_DIR $SMCP_TOOLS_DIR/*.json \\
		$SMCP_TOOLS_DIR/include $SMCP_TOOLS_DIR/include/*.json
	$NGX_OBJS/smcp-embed tools \\
		$NGX_OBJS/ngx_http_sandbox_mcp_tools_json.h $SMCP_TOOLS_DIR

$NGX_OBJS/ngx_http_sandbox_mcp_ui_files.h:	$NGX_OBJS/smcp-embed \\
		$SMCP_UI_DIR $SMCP_UI_DIR/* $SMCP_UI_DIR/static/* \\
		$SMCP_UI_DIR/layouts/*.html
	$NGX_OBJS/smcp-embed ui \\
		$NGX_OBJS/ngx_http_sandbox_mcp_ui_files.h $SMCP_UI_DIR

$NGX_OBJS/ngx_http_sandbox_mcp_oauth_html.h:	$NGX_OBJS/smcp-embed \\
		$SMCP_OAUTH_DIR $SMCP_OAUTH_DIR/*.html \\
		$SMCP_OAUTH_DIR/layouts/*.html
	$NGX_OBJS/smcp-embed html \\
		$NGX_OBJS/ngx_http_sandbox_mcp_oauth_html.h $SMCP_OAUTH_DIR

$NGX_OBJS/ngx_http_sandbox_mcp_oauth_css.h:	$NGX_OBJS/smcp-embed \\
		$SMCP_OAUTH_DIR $SMCP_OAUTH_DIR/*.css
	$NGX_OBJS/smcp-embed css \\
		$NGX_OBJS/ngx_http_sandbox_mcp_oauth_css.h $SMCP_OAUTH_DIR

END
