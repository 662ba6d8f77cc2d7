//! `reverb info --config`: every `REVERB_*` variable with its default, its current value and
//! its meaning (as `ucx_info -c` does); `--json` for machines.

use anyhow::Result;
use clap::Args;
use reverb_transport::config::registry::{Var, VARS};

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// List every REVERB_* variable: default, current value, meaning.
    #[arg(long)]
    pub config: bool,
    /// Print the list as JSON.
    #[arg(long, requires = "config")]
    pub json: bool,
}

/// Variables whose values are secrets: shown as set or not, never printed.
const SECRETS: &[&str] = &["REVERB_JOB_TOKEN"];

/// The value of `var` in this process's environment, masked when secret.
fn current(var: &Var) -> Option<String> {
    let value = std::env::var_os(var.name)?;
    if SECRETS.contains(&var.name) {
        return Some("(hidden)".into());
    }
    Some(value.to_string_lossy().into_owned())
}

pub fn main(args: InfoArgs) -> Result<()> {
    if !args.config {
        println!("reverb {}", env!("CARGO_PKG_VERSION"));
        println!("`reverb info --config [--json]` lists the REVERB_* configuration variables.");
        return Ok(());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&as_json())?);
    } else {
        print!("{}", as_text());
    }
    Ok(())
}

fn as_json() -> serde_json::Value {
    let vars: Vec<serde_json::Value> = VARS
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v.name,
                "default": v.default,
                "current": current(v),
                "valid": current(v).map(|value| v.check(&value).is_ok()),
                "layer": v.layer.as_str(),
                "audience": v.audience.as_str(),
                "form": v.form,
                "bounds": v.bound().map(|_| v.bound_text()),
                "meaning": v.meaning,
            })
        })
        .collect();
    serde_json::Value::Array(vars)
}

/// One block per variable, grouped by layer; the `NAME=value` line holds the current value,
/// or the default when unset.
fn as_text() -> String {
    let mut out = String::from(
        "# reverb configuration (REVERB_* environment variables)\n\
         # sizes: 8, 4k, 64K, 1m, 2g (powers of 1024); durations: 250ms, 2s, 50us, 1min, a bare number\n\
         # in the unit of the name's suffix (_US, _MS, _S); booleans: 1/0, true/false, yes/no, on/off\n",
    );
    let mut layer = None;
    for v in VARS {
        if layer != Some(v.layer) {
            layer = Some(v.layer);
            out.push_str(&format!("\n# ---- {} ----\n", v.layer.as_str()));
        }
        out.push_str(&format!("#\n# {}\n", v.meaning));
        let default = if v.default.is_empty() { "(unset)" } else { v.default };
        let bounds =
            if v.bound().is_some() { format!("; bounds: {}", v.bound_text()) } else { String::new() };
        out.push_str(&format!(
            "# form: {}{bounds}; default: {default}; set by: {}\n",
            v.form,
            v.audience.as_str()
        ));
        out.push_str(&value_line(v));
    }
    out
}

/// `NAME=current`, `NAME=default` when unset with a literal default, else `# NAME (unset)`;
/// a current value that does not fit the variable's form is flagged.
fn value_line(v: &Var) -> String {
    match current(v) {
        Some(value) => match v.check(&value) {
            Ok(()) => format!("{}={value}\n", v.name),
            Err(e) => format!("{}={value}\n# ^ INVALID: {e}\n", v.name),
        },
        None if v.default.is_empty() || v.default.contains(' ') => format!("# {} (unset)\n", v.name),
        None => format!("{}={}\n", v.name, v.default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_listed_in_both_forms() {
        let text = as_text();
        let json = as_json();
        let listed = json.as_array().map(Vec::len);
        assert_eq!(listed, Some(VARS.len()));
        for v in VARS {
            let named =
                |l: &str| l.starts_with(&format!("{}=", v.name)) || l == format!("# {} (unset)", v.name);
            assert!(text.lines().any(named), "{}", v.name);
        }
    }
}
