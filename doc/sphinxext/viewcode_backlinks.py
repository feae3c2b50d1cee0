"""The ``[docs]`` links of the highlighted-source pages (``sphinx.ext.viewcode``) point at the
anchor of each object's own documentation.

viewcode writes one module's links as ``<page>#<prefix>.<name>`` with the same prefix for every
object of the module: the module path under which the first of them was documented.  A module
whose objects are documented under two paths (``sktensor_fast.load_tns``, re-exported by the
package, beside ``sktensor_fast.io.read_labels``) thus gets links to anchors that do not
exist.  When a highlighted-source page is written, each such link is pointed at the anchor the
Python domain recorded for the object on that page.
"""
from sphinx.ext.viewcode import OUTPUT_DIRNAME


def _anchor(objects, docname, name):
    """The anchor of the object ``name`` (without its module) documented on ``docname``, or
    None when there is not exactly one."""
    found = {entry.node_id for full, entry in objects.items()
             if entry.docname == docname and not entry.aliased
             and (full == name or full.endswith("." + name))}
    return found.pop() if len(found) == 1 else None


def fix_backlinks(app, pagename, templatename, context, doctree):
    prefix = OUTPUT_DIRNAME + "/"
    if not pagename.startswith(prefix) or "body" not in context:
        return
    modname = pagename[len(prefix):].replace("/", ".")
    entry = getattr(app.env, "_viewcode_modules", {}).get(modname)
    if not entry:
        return
    _code, _tags, used, refname = entry
    objects = app.env.get_domain("py").objects
    body = context["body"]
    for name, docname in used.items():
        written = refname + "." + name
        if written in objects and objects[written].docname == docname:
            continue
        anchor = _anchor(objects, docname, name)
        if anchor is None:
            continue
        uri = app.builder.get_relative_uri(pagename, docname)
        body = body.replace(f'href="{uri}#{written}"', f'href="{uri}#{anchor}"')
    context["body"] = body


def setup(app):
    app.setup_extension("sphinx.ext.viewcode")
    app.connect("html-page-context", fix_backlinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
