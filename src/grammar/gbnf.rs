//! GBNF (llama.cpp's grammar format, which vLLM's users also send as "EBNF") rewritten as
//! the Lark-like syntax llguidance reads: `::=` becomes `:`, `root` becomes `start`, rule
//! names are lower-cased (Lark reads capitalised names as terminals), character classes
//! `[...]` become regex terminals `/[...]/` (Lark's `[...]` means "optional"), a rule's
//! continuation lines are joined to it, and `.` becomes "any character". Strings, groups,
//! alternatives and repetitions (`* + ? {m,n}`) read the same in both.

/// Whether `grammar` is written in GBNF (rather than Lark).
pub fn is_gbnf(grammar: &str) -> bool {
    grammar.contains("::=")
}

/// The Lark form of a GBNF grammar.
pub fn gbnf_to_lark(grammar: &str) -> String {
    let mut rules: Vec<String> = Vec::new();
    for line in grammar.lines() {
        let line = convert_line(line);
        if line.trim().is_empty() {
            continue;
        }
        if line.contains("::=") || rules.is_empty() {
            rules.push(line.replacen("::=", ":", 1));
        } else if let Some(last) = rules.last_mut() {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    rules.join("\n")
}

/// One line with comments dropped, names normalised and character classes rewritten;
/// strings pass through untouched.
fn convert_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                copy_until(&mut chars, &mut out, '"');
            }
            '[' => {
                out.push_str("/[");
                let mut class = String::new();
                copy_until(&mut chars, &mut class, ']');
                out.push_str(&class.replace('/', "\\/"));
                out.push('/');
            }
            '#' => break,
            '.' => out.push_str("/(?s:.)/"),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut name = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' || n == '-' {
                        name.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                let name = name.to_ascii_lowercase().replace('-', "_");
                out.push_str(if name == "root" { "start" } else { &name });
            }
            c => out.push(c),
        }
    }
    out
}

/// Copies up to and including the unescaped `end`.
fn copy_until(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String, end: char) {
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '\\' {
            if let Some(escaped) = chars.next() {
                out.push(escaped);
            }
        } else if c == end {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_classes_names_and_continuations_are_rewritten() {
        let gbnf = r#"
# a greeting
root ::= greeting " " Name-Part
greeting ::= "hi" | "hello"   # two ways
Name-Part ::= [A-Z] [a-z/]+
  ( "-" [a-z]+ )?
"#;
        let lark = gbnf_to_lark(gbnf);
        assert_eq!(
            lark,
            "start : greeting \" \" name_part\n\
             greeting : \"hi\" | \"hello\"   \n\
             name_part : /[A-Z]/ /[a-z\\/]/+ ( \"-\" /[a-z]/+ )?"
        );
        assert!(is_gbnf(gbnf));
        assert!(!is_gbnf("start: \"a\""));
    }

    #[test]
    fn strings_keep_their_brackets_hashes_and_escapes() {
        let lark = gbnf_to_lark(r#"root ::= "[#\"x\"]" [^"\\]"#);
        assert_eq!(lark, r#"start : "[#\"x\"]" /[^"\\]/"#);
    }
}
