// Small SVG line charts for the overview: a few series over the last minutes, redrawn at each
// poll. Drawn by hand (no chart library) to keep the console a handful of small files.

import { el } from "./dom.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 600;
const HEIGHT = 170;
const LEFT = 48;
const RIGHT = 8;
const TOP = 8;
const BOTTOM = 20;

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The smallest of 1, 2, 5 × 10^n at or above `value`, so grid lines fall on round numbers. */
function niceCeiling(value) {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (step * magnitude >= value) return step * magnitude;
  }
  return 10 * magnitude;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
}

/**
 * A chart of `series` ([{key, label, color}]); `format` turns a value into the legend's text.
 * `render(history)` draws history = [{time: ms, values: {key: number}}], oldest first.
 */
export function lineChart(title, series, format) {
  const plot = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
  const legend = el("div", { class: "legend" });
  const node = el("div", { class: "chart", dataset: { chart: title } }, el("h3", {}, title), plot, legend);

  function render(history) {
    plot.replaceChildren();
    const innerWidth = WIDTH - LEFT - RIGHT;
    const innerHeight = HEIGHT - TOP - BOTTOM;
    const highest = Math.max(0, ...history.flatMap((point) => series.map((s) => point.values[s.key] || 0)));
    const top = niceCeiling(highest);
    for (let i = 0; i <= 4; i++) {
      const y = TOP + innerHeight - (innerHeight * i) / 4;
      plot.appendChild(svg("line", { class: "grid", x1: LEFT, x2: WIDTH - RIGHT, y1: y, y2: y }));
      const label = (top * i) / 4;
      // Quarters of a round top: at most two decimals (0.25, 2.5), none for whole numbers.
      const text = String(Number(label.toFixed(2)));
      plot.appendChild(svg("text", { class: "axis", x: LEFT - 6, y: y + 3, "text-anchor": "end" }, text));
    }
    if (history.length > 0) {
      const first = history[0].time;
      const last = history[history.length - 1].time;
      const span = Math.max(last - first, 1);
      const x = (time) => (history.length === 1 ? LEFT + innerWidth : LEFT + ((time - first) / span) * innerWidth);
      const y = (value) => TOP + innerHeight - (Math.min(value, top) / top) * innerHeight;
      plot.appendChild(svg("text", { class: "axis", x: LEFT, y: HEIGHT - 4 }, clock(first)));
      plot.appendChild(svg("text", { class: "axis", x: WIDTH - RIGHT, y: HEIGHT - 4, "text-anchor": "end" }, clock(last)));
      for (const s of series) {
        const points = history.map((point) => `${x(point.time).toFixed(1)},${y(point.values[s.key] || 0).toFixed(1)}`);
        if (history.length === 1) points.unshift(`${LEFT},${y(history[0].values[s.key] || 0).toFixed(1)}`);
        plot.appendChild(svg("polyline", { points: points.join(" "), stroke: s.color, "data-series": s.key }));
      }
    }
    const latest = history.length ? history[history.length - 1].values : {};
    legend.replaceChildren(
      ...series.map((s) =>
        el("span", { dataset: { series: s.key } }, el("i", { style: `background:${s.color}` }), s.label + " ", el("b", {}, format(latest[s.key] || 0))),
      ),
    );
  }

  render([]);
  return { node, render };
}
