//! Aligned plain-text tables for human output.

/// A table with a header row; cells are preformatted strings.
#[derive(Debug, Default, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self { header: header.into_iter().map(Into::into).collect(), rows: Vec::new() }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Left-align the first column (labels), right-align the others (numbers).
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).chain([self.header.len()]).max().unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for line in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let format_line = |line: &Vec<String>| {
            let cells: Vec<String> = (0..columns)
                .map(|i| {
                    let cell = line.get(i).map(String::as_str).unwrap_or("");
                    if i == 0 {
                        format!("{cell:<w$}", w = widths[i])
                    } else {
                        format!("{cell:>w$}", w = widths[i])
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        };
        let mut out = format_line(&self.header);
        out.push('\n');
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&format_line(row));
            out.push('\n');
        }
        out
    }
}

/// Format a number with a fixed count of significant digits, without exponent for
/// everyday magnitudes.
pub fn sig(value: f64, digits: usize) -> String {
    if !value.is_finite() {
        return if value.is_nan() { "n/a".into() } else { "inf".into() };
    }
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs().log10().floor() as i32;
    if !(-4..=9).contains(&magnitude) {
        return format!("{value:.*e}", digits.saturating_sub(1));
    }
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(["name", "value"]);
        t.row(["a", "1.5"]);
        t.row(["longer", "10"]);
        let text = t.render();
        assert!(text.contains("longer     10"), "{text}");
        assert!(text.lines().nth(1).unwrap().starts_with("------"));
    }

    #[test]
    fn significant_digits() {
        assert_eq!(sig(23.9567, 3), "24.0");
        assert_eq!(sig(0.99979, 4), "0.9998");
        assert_eq!(sig(4812.0, 3), "4812");
        assert_eq!(sig(f64::INFINITY, 3), "inf");
        assert_eq!(sig(1.0e-7, 2), "1.0e-7");
    }
}
