//! Line charts as plain SVG text: small multiples (one panel per visitor count, like figures
//! 6.1–6.3 of the thesis, Distributed Virtual Waiting Room), one line per series. No plotting
//! crate: the output is a few hundred lines of SVG any browser renders.

use std::fmt::Write;

/// One line of a panel.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Stroke colour (any SVG colour).
    pub color: String,
    /// Drawn dashed (reference values).
    pub dashed: bool,
    /// (x, y) points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// One chart panel.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

const PANEL_W: f64 = 360.0;
const PANEL_H: f64 = 260.0;
const MARGIN_L: f64 = 70.0;
const MARGIN_R: f64 = 15.0;
const MARGIN_T: f64 = 30.0;
const MARGIN_B: f64 = 45.0;
const LEGEND_H: f64 = 18.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number short enough for a tick label.
fn tick_label(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 0.01 && v.abs() < 10_000.0 {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.1e}")
    }
}

/// Renders `panels` in a grid `columns` wide under a `title`.
pub fn render(title: &str, panels: &[Panel], columns: usize) -> String {
    let columns = columns.max(1);
    let rows = panels.len().div_ceil(columns).max(1);
    let legend_rows = panels.iter().map(|p| p.series.len()).max().unwrap_or(0) as f64;
    let cell_h = PANEL_H + legend_rows * LEGEND_H;
    let width = columns as f64 * PANEL_W;
    let height = 40.0 + rows as f64 * cell_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let ox = (i % columns) as f64 * PANEL_W;
        let oy = 40.0 + (i / columns) as f64 * cell_h;
        draw_panel(&mut s, panel, ox, oy);
    }
    s.push_str("</svg>\n");
    s
}

/// Where a panel is drawn and the data range it shows: x from `x0` to `x1`, y from 0 to `y1`.
struct Frame {
    left: f64,
    top: f64,
    w: f64,
    h: f64,
    x0: f64,
    x1: f64,
    y1: f64,
}

impl Frame {
    /// The frame of panel `p` with its top left corner at (`ox`, `oy`): every point fits, y
    /// starts at 0 with a tenth of headroom.
    fn new(p: &Panel, ox: f64, oy: f64) -> Self {
        let pts = p.series.iter().flat_map(|x| x.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            if y.is_finite() {
                y1 = y1.max(y);
            }
        }
        if !x0.is_finite() {
            (x0, x1) = (0.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if y1 <= 0.0 {
            y1 = 1.0;
        }
        Frame {
            left: ox + MARGIN_L,
            top: oy + MARGIN_T,
            w: PANEL_W - MARGIN_L - MARGIN_R,
            h: PANEL_H - MARGIN_T - MARGIN_B,
            x0,
            x1,
            y1: y1 * 1.1,
        }
    }

    fn sx(&self, x: f64) -> f64 {
        self.left + (x - self.x0) / (self.x1 - self.x0) * self.w
    }

    fn sy(&self, y: f64) -> f64 {
        self.top + self.h - y / self.y1 * self.h
    }
}

fn draw_panel(s: &mut String, p: &Panel, ox: f64, oy: f64) {
    let f = Frame::new(p, ox, oy);
    draw_axes(s, p, &f, ox, oy);
    for (k, series) in p.series.iter().enumerate() {
        draw_series(s, series, &f, oy + PANEL_H + k as f64 * LEGEND_H);
    }
}

/// The title, the box, the y grid, the x ticks (one per x value) and the axis labels.
fn draw_axes(s: &mut String, p: &Panel, f: &Frame, ox: f64, oy: f64) {
    let (left, top, w, h) = (f.left, f.top, f.w, f.h);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>"#,
        left + w / 2.0,
        oy + 18.0,
        escape(&p.title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>"##
    );
    for k in 0..=4 {
        let v = f.y1 * f64::from(k) / 4.0;
        let y = f.sy(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + w,
            left - 4.0,
            y + 4.0,
            tick_label(v)
        );
    }
    let mut xs: Vec<f64> = p
        .series
        .iter()
        .flat_map(|x| x.points.iter().map(|q| q.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            f.sx(x),
            top + h + 14.0,
            tick_label(x)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + w / 2.0,
        top + h + 32.0,
        escape(&p.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        ox + 14.0,
        top + h / 2.0,
        escape(&p.y_label)
    );
}

/// One series: its line, a dot per point, and its legend entry at height `ly`.
fn draw_series(s: &mut String, series: &Series, f: &Frame, ly: f64) {
    let path: Vec<String> = series
        .points
        .iter()
        .filter(|q| q.1.is_finite())
        .map(|&(x, y)| format!("{:.1},{:.1}", f.sx(x), f.sy(y)))
        .collect();
    let dash = if series.dashed {
        r#" stroke-dasharray="5,4""#
    } else {
        ""
    };
    let color = escape(&series.color);
    let _ = writeln!(
        s,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
        path.join(" ")
    );
    for pt in &path {
        let (x, y) = pt.split_once(',').unwrap_or(("0", "0"));
        let _ = writeln!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
    }
    let left = f.left;
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
        left + 24.0,
        left + 30.0,
        ly + 4.0,
        escape(&series.name)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_well_formed_svg() {
        let panel = Panel {
            title: "100 visitors".into(),
            x_label: "nodes added and removed".into(),
            y_label: "Kendall-Tau".into(),
            series: vec![
                Series {
                    name: "target 20 <ours>".into(),
                    color: "#1f77b4".into(),
                    dashed: false,
                    points: vec![(0.0, 0.0), (1.0, 1e-6), (5.0, 4e-6)],
                },
                Series {
                    name: "thesis".into(),
                    color: "#d62728".into(),
                    dashed: true,
                    points: vec![(0.0, 2e-6), (5.0, 3e-6)],
                },
            ],
        };
        let svg = render("Kendall-Tau & churn", &[panel.clone(), panel], 2);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("&lt;ours&gt;"));
        assert!(svg.contains("&amp;"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(5.0), "5");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(3.5e-6), "3.5e-6");
    }
}
