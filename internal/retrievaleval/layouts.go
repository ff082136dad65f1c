package retrievaleval

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LoCoMo's categories (qa[].category 1-5) in the native names. Open-domain questions keep
// their own name; adversarial questions (5) ask about what was never said, and are scored as
// abstention (their evidence, the turns they twist, is dropped).
var locomoCategory = map[int]string{1: MultiHop, 2: Temporal, 3: "open-domain", 4: SingleHop, 5: Abstention}

type locomoSample struct {
	SampleID     string                     `json:"sample_id"`
	Conversation map[string]json.RawMessage `json:"conversation"`
	QA           []struct {
		Question string          `json:"question"`
		Answer   any             `json:"answer"`
		Evidence []string        `json:"evidence"`
		Category json.RawMessage `json:"category"`
	} `json:"qa"`
}

// parseLoCoMo reads LoCoMo's layout: samples whose conversation holds session_N lists of
// {speaker, dia_id, text} and session_N_date_time, and whose qa holds question, answer,
// evidence (dia ids) and category 1-5. Dia ids are prefixed with the sample id, so that turn
// ids stay unique across samples.
func parseLoCoMo(raw []byte) (Dataset, error) {
	var samples []locomoSample
	if err := json.Unmarshal(raw, &samples); err != nil {
		return Dataset{}, fmt.Errorf("LoCoMo layout: %w", err)
	}
	var ds Dataset
	for i, s := range samples {
		cid := s.SampleID
		if cid == "" {
			cid = fmt.Sprintf("locomo%d", i+1)
		}
		var nums []int
		for k := range s.Conversation {
			if n, ok := strings.CutPrefix(k, "session_"); ok {
				if v, err := strconv.Atoi(n); err == nil {
					nums = append(nums, v)
				}
			}
		}
		sort.Ints(nums)
		conv := Conversation{ID: cid}
		for _, n := range nums {
			var turns []struct {
				Speaker string `json:"speaker"`
				DiaID   string `json:"dia_id"`
				Text    string `json:"text"`
			}
			if err := json.Unmarshal(s.Conversation[fmt.Sprintf("session_%d", n)], &turns); err != nil {
				return Dataset{}, fmt.Errorf("LoCoMo sample %s session_%d: %w", cid, n, err)
			}
			sess := Session{ID: fmt.Sprintf("%s-session_%d", cid, n)}
			var when string
			_ = json.Unmarshal(s.Conversation[fmt.Sprintf("session_%d_date_time", n)], &when)
			sess.Date = parseLoCoMoDate(when)
			for _, t := range turns {
				sess.Turns = append(sess.Turns, Turn{ID: cid + ":" + t.DiaID, Speaker: t.Speaker, Text: t.Text})
			}
			conv.Sessions = append(conv.Sessions, sess)
		}
		ds.Conversations = append(ds.Conversations, conv)
		for j, qa := range s.QA {
			var cat int
			if err := json.Unmarshal(qa.Category, &cat); err != nil {
				return Dataset{}, fmt.Errorf("LoCoMo sample %s qa[%d].category: want a number 1-5: %w", cid, j, err)
			}
			name, ok := locomoCategory[cat]
			if !ok {
				return Dataset{}, fmt.Errorf("LoCoMo sample %s qa[%d].category %d: want 1-5", cid, j, cat)
			}
			q := Question{ID: fmt.Sprintf("%s-q%d", cid, j+1), Conversation: cid, Question: qa.Question, Answer: qa.Answer, Category: name}
			if name != Abstention {
				for _, e := range qa.Evidence {
					// Some LoCoMo evidence fields hold several ids in one string ("D1:3; D2:5").
					for _, id := range strings.FieldsFunc(e, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
						q.Evidence = append(q.Evidence, cid+":"+id)
					}
				}
			}
			ds.Questions = append(ds.Questions, q)
		}
	}
	return ds, nil
}

// parseLoCoMoDate reads "1:56 pm on 8 May, 2023"; anything else is the zero time.
func parseLoCoMoDate(s string) time.Time {
	for _, layout := range []string{"3:04 pm on 2 January, 2006", "3:04 pm on 2 Jan, 2006"} {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			return t
		}
	}
	return time.Time{}
}

type longMemEvalQuestion struct {
	QuestionID        string   `json:"question_id"`
	QuestionType      string   `json:"question_type"`
	Question          string   `json:"question"`
	Answer            any      `json:"answer"`
	QuestionDate      string   `json:"question_date"`
	HaystackSessionID []string `json:"haystack_session_ids"`
	HaystackDates     []string `json:"haystack_dates"`
	HaystackSessions  [][]struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		HasAnswer bool   `json:"has_answer"`
	} `json:"haystack_sessions"`
	AnswerSessionIDs []string `json:"answer_session_ids"`
}

// LongMemEval's question types in the native names; a question id ending in _abs is an
// abstention question whatever its type.
var longMemEvalCategory = map[string]string{
	"single-session-user": SingleHop, "single-session-assistant": SingleHop,
	"single-session-preference": Preference, "multi-session": MultiHop,
	"temporal-reasoning": Temporal, "knowledge-update": KnowledgeUpdate,
}

// parseLongMemEval reads LongMemEval's layout: each question carries its own haystack of
// sessions ({role, content, has_answer} turns) with their dates, so each question is a
// conversation of its own. The evidence is the turns marked has_answer in the answer
// sessions, or every turn of the answer sessions when none is marked.
func parseLongMemEval(raw []byte) (Dataset, error) {
	var qs []longMemEvalQuestion
	if err := json.Unmarshal(raw, &qs); err != nil {
		return Dataset{}, fmt.Errorf("LongMemEval layout: %w", err)
	}
	var ds Dataset
	for i, q := range qs {
		cid := q.QuestionID
		if cid == "" {
			cid = fmt.Sprintf("lme%d", i+1)
		}
		cat, ok := longMemEvalCategory[q.QuestionType]
		if !ok {
			cat = q.QuestionType
		}
		abstain := strings.HasSuffix(cid, "_abs")
		if abstain {
			cat = Abstention
		}
		answer := map[string]bool{}
		for _, id := range q.AnswerSessionIDs {
			answer[id] = true
		}
		conv := Conversation{ID: cid}
		var marked, all []string
		for j, turns := range q.HaystackSessions {
			sid := fmt.Sprintf("s%d", j+1)
			if j < len(q.HaystackSessionID) {
				sid = q.HaystackSessionID[j]
			}
			sess := Session{ID: cid + ":" + sid}
			if j < len(q.HaystackDates) {
				sess.Date = parseLongMemEvalDate(q.HaystackDates[j])
			}
			for k, t := range turns {
				tid := fmt.Sprintf("%s:%s:%d", cid, sid, k+1)
				sess.Turns = append(sess.Turns, Turn{ID: tid, Speaker: t.Role, Text: t.Content})
				if answer[sid] {
					all = append(all, tid)
					if t.HasAnswer {
						marked = append(marked, tid)
					}
				}
			}
			conv.Sessions = append(conv.Sessions, sess)
		}
		ds.Conversations = append(ds.Conversations, conv)
		nq := Question{ID: cid, Conversation: cid, Question: q.Question, Answer: q.Answer, Category: cat}
		if !abstain {
			nq.Evidence = marked
			if len(marked) == 0 {
				nq.Evidence = all
			}
		}
		if t := parseLongMemEvalDate(q.QuestionDate); !t.IsZero() {
			nq.AskedAt = &t
		}
		ds.Questions = append(ds.Questions, nq)
	}
	return ds, nil
}

// parseLongMemEvalDate reads "2023/05/20 (Sat) 02:21"; anything else is the zero time.
func parseLongMemEvalDate(s string) time.Time {
	if t, err := time.Parse("2006/01/02 (Mon) 15:04", s); err == nil {
		return t
	}
	return time.Time{}
}
