// The attention explorer: a trained model's attention for one prompt, every layer and head, in
// one HTML file that works offline. The weights travel as JSON inside the page; a short script
// draws one panel per (layer, head), each a copy of the prompt, and colours the characters of
// every panel by the weight the pointed-at character (the query) gives them, relative to the
// largest weight of that row.
//
// Opening the page with #query=N in its address selects query N as if it had been pointed at
// (by dispatching the same pointer event), so a headless browser can check the page's reaction.
#include <fmt/format.h>

#include "minigpt.h"

namespace minigpt {

namespace {

// A JSON string literal that is also safe inside <script>: '<' is written as \u003c.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += std::string("\\") + static_cast<char>(c);
    else if (c < 0x20 || c == '<')
      out += fmt::format("\\u{:04x}", c);
    else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 1.5em; color: #222; }
#prompt, .keys { font-family: monospace; font-size: 18px; white-space: pre; }
#prompt .tok { cursor: pointer; padding: 2px 1px; border-bottom: 2px solid #ccc; }
#prompt .tok.query { border-bottom-color: #c33; background: #fde; }
#panels { display: grid; grid-template-columns: max-content 1fr; gap: 0.2em 1em; margin-top: 1em; align-items: baseline; }
.panel { display: contents; }
.panel h2 { font-size: 13px; margin: 0; font-weight: normal; color: #555; }
.keys .cell { padding: 2px 1px; }
.keys .cell.query { outline: 1px solid #c33; }
)";

constexpr const char* kScript = R"(
const data = JSON.parse(document.getElementById('attention-data').textContent);
const shown = t => t === ' ' ? '\u2423' : t === '\n' ? '\u23ce' : t;
const prompt = document.getElementById('prompt');
data.tokens.forEach((t, i) => {
  const span = document.createElement('span');
  span.className = 'tok'; span.dataset.i = i; span.textContent = shown(t);
  prompt.appendChild(span);
});
const panels = document.getElementById('panels');
for (let l = 0; l < data.layers; ++l)
  for (let h = 0; h < data.heads; ++h) {
    const panel = document.createElement('div');
    panel.className = 'panel'; panel.id = `panel-${l}-${h}`;
    panel.dataset.layer = l; panel.dataset.head = h;
    panel.innerHTML = `<h2>layer ${l}, head ${h}</h2>`;
    const keys = document.createElement('div');
    keys.className = 'keys';
    data.tokens.forEach((t, j) => {
      const cell = document.createElement('span');
      cell.className = 'cell'; cell.dataset.j = j; cell.textContent = shown(t);
      keys.appendChild(cell);
    });
    panel.appendChild(keys);
    panels.appendChild(panel);
  }
function select(i) {
  document.body.dataset.query = i;
  prompt.querySelectorAll('.tok').forEach(t => t.classList.toggle('query', +t.dataset.i === i));
  panels.querySelectorAll('.panel').forEach(panel => {
    const row = data.weights[+panel.dataset.layer][+panel.dataset.head][i];
    panel.dataset.query = i;
    const top = Math.max(...row);  // colours are relative to the row's largest weight
    panel.querySelectorAll('.cell').forEach(cell => {
      const w = row[+cell.dataset.j];
      cell.dataset.weight = w.toFixed(6);
      cell.style.background = `rgba(204, 51, 17, ${(top > 0 ? 0.85 * w / top : 0).toFixed(3)})`;
      cell.classList.toggle('query', +cell.dataset.j === i);
      cell.title = `weight ${w.toFixed(3)}`;
    });
  });
}
// Pointing at a character of the prompt, or of any panel, makes it the query.
document.addEventListener('pointerover', e => {
  const t = e.target.closest('.tok, .cell');
  if (t) select(+(t.dataset.i ?? t.dataset.j));
});
select(data.tokens.length - 1);
const asked = location.hash.match(/query=(\d+)/);
if (asked) {
  const tok = prompt.querySelector(`.tok[data-i="${asked[1]}"]`);
  if (tok) tok.dispatchEvent(new PointerEvent('pointerover', {bubbles: true}));
}
)";

}  // namespace

std::string attention_html(const PromptAttention& attention, const std::string& title) {
  if (attention.weights.empty()) throw std::invalid_argument("attention_html: no layers");
  std::int64_t heads = attention.weights[0].size(1), t = attention.weights[0].size(2);
  std::string json = fmt::format("{{\"layers\": {}, \"heads\": {}, \"tokens\": [", attention.weights.size(), heads);
  for (std::size_t i = 0; i < attention.tokens.size(); ++i) json += (i ? ", " : "") + json_string(attention.tokens[i]);
  json += "], \"weights\": [";
  for (std::size_t l = 0; l < attention.weights.size(); ++l) {
    const double* p = attention.weights[l].data_ptr<double>();
    json += l ? ",\n[" : "\n[";
    for (std::int64_t h = 0; h < heads; ++h) {
      json += h ? ", [" : "[";
      for (std::int64_t i = 0; i < t; ++i) {
        json += i ? ", [" : "[";
        for (std::int64_t j = 0; j < t; ++j) json += fmt::format("{}{:.6g}", j ? "," : "", p[(h * t + i) * t + j]);
        json += "]";
      }
      json += "]";
    }
    json += "]";
  }
  json += "]}";
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>attention: {0}</title>\n"
      "<style>{1}</style>\n</head>\n<body>\n<h1>Attention of {0}</h1>\n"
      "<p>Point at a character: every row (one per layer and head) colours the characters by the weight that "
      "character, the query, gives them, the darkest being its largest weight; hover a character for the number. "
      "A causal model's queries only see themselves and what came before.</p>\n"
      "<div id=\"prompt\"></div>\n<div id=\"panels\"></div>\n"
      "<script id=\"attention-data\" type=\"application/json\">{2}</script>\n<script>{3}</script>\n</body>\n</html>\n",
      html_escape(title), kStyle, json, kScript);
}

}  // namespace minigpt
