#ifndef GECD_PTB_TEXT_PTB_TEXT_H_
#define GECD_PTB_TEXT_PTB_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

// JFLEG's text is Penn-Treebank tokenized: "I do n't know , she said ." The model reads and
// writes natural text, so gecd eval detokenizes sources before they go to the model and
// tokenizes its outputs the same way as the references before scoring; gecd-load's typing
// sessions and bench/cpu_peer detokenize the same sources into what a user would type. Plain
// string functions on ASCII punctuation (other bytes pass through), so that all of them share
// one detokenizer without linking the engine.
namespace gecd::ptb_text {

// Whitespace-separated tokens of `line` (space, tab, newline, CR, FF, VT).
std::vector<std::string> SplitTokens(std::string_view line);

// Joins PTB tokens into natural text: no space before . , ; : ? ! % ) ] } ... '' and the
// clitics 's 'm 're 've 'll 'd n't (any case), or after ( [ { $ ``; a lone ' closes a plural
// possessive; straight double quotes alternate opening and closing; `` and '' become ".
std::string PtbDetokenize(std::string_view tokenized);

// Splits natural text the Treebank way (one sentence per line, as JFLEG's references are):
// . only at the end of the text (before closing quotes and brackets); , and : unless a digit
// follows; ; ? ! % $ " ( ) [ ] { } and ... everywhere; the clitics above off their word;
// a final ' after a word. Curly quotes and apostrophes become ASCII first. Hyphens, slashes
// and inner periods (e.g. "U.S.", "Mr.") stay inside words. Tokens are joined by one space.
std::string PtbTokenize(std::string_view text);

// Runs of whitespace become one space; no leading or trailing space.
std::string NormalizeWhitespace(std::string_view text);

}  // namespace gecd::ptb_text

#endif  // GECD_PTB_TEXT_PTB_TEXT_H_
