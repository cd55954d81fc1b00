#ifndef GECD_EVAL_PTB_TEXT_H_
#define GECD_EVAL_PTB_TEXT_H_

#include <string>
#include <string_view>

// JFLEG's text is Penn-Treebank tokenized: "I do n't know , she said ." The model reads and
// writes natural text, so sources are detokenized before they go to the model and its outputs
// are tokenized the same way as the references before scoring.
namespace gecd::eval {

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

}  // namespace gecd::eval

#endif  // GECD_EVAL_PTB_TEXT_H_
