//! The waiting page's languages: English, German, French and Spanish, chosen per request from
//! `Accept-Language` (or fixed with `page_language`). Every sentence the page shows, the
//! server's and its script's, comes from here; templates get them as placeholders.

use axum::http::HeaderMap;
use axum::http::header::ACCEPT_LANGUAGE;

/// A language of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// English (the default).
    En,
    /// German.
    De,
    /// French.
    Fr,
    /// Spanish.
    Es,
}

impl Lang {
    /// Every language, in the order `--page-language` lists them.
    pub const ALL: [Lang; 4] = [Lang::En, Lang::De, Lang::Fr, Lang::Es];

    /// Its tag (`<html lang>`, `--page-language`).
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::De => "de",
            Lang::Fr => "fr",
            Lang::Es => "es",
        }
    }

    /// The language a tag names (`de`, `de-AT`, `DE`), if the page has it.
    pub fn from_tag(tag: &str) -> Option<Lang> {
        let primary = tag.split(['-', '_']).next()?.trim();
        Lang::ALL
            .into_iter()
            .find(|l| l.tag().eq_ignore_ascii_case(primary))
    }

    /// The language a request prefers among the page's: the highest `q` in `Accept-Language`
    /// (the first on a tie), English when none of them is asked for.
    pub fn negotiate(headers: &HeaderMap) -> Lang {
        let Some(header) = headers.get(ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()) else {
            return Lang::En;
        };
        let mut best: Option<(u32, Lang)> = None;
        // A header is short; a hostile one is cut at 32 entries.
        for entry in header.split(',').take(32) {
            let mut parts = entry.split(';');
            let tag = parts.next().unwrap_or("").trim();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(1000, |q| {
                    (q.trim().parse::<f32>().unwrap_or(0.0) * 1000.0) as u32
                });
            if let Some(lang) = Lang::from_tag(tag)
                && q > 0
                && best.is_none_or(|(b, _)| q > b)
            {
                best = Some((q, lang));
            }
        }
        best.map_or(Lang::En, |(_, l)| l)
    }

    /// The page's sentences in this language.
    pub fn strings(self) -> &'static Strings {
        match self {
            Lang::En => &EN,
            Lang::De => &DE,
            Lang::Fr => &FR,
            Lang::Es => &ES,
        }
    }
}

/// Every sentence of the page. `{m}`, `{h}` and `{s}` stand for minutes, hours and seconds.
#[derive(Debug)]
pub struct Strings {
    /// The default title (when the operator set none).
    pub title: &'static str,
    /// The default explanation.
    pub text: &'static str,
    /// Heading over the position.
    pub place: &'static str,
    /// The no-JavaScript join button.
    pub join_button: &'static str,
    /// Under the position, on a page without a place yet.
    pub take_place: &'static str,
    /// While the page's script joins.
    pub taking_place: &'static str,
    /// The note at the bottom (`{s}`: the refresh interval in seconds).
    pub note: &'static str,
    /// Wait not known yet.
    pub eta_unknown: &'static str,
    /// Wait under a minute.
    pub eta_seconds: &'static str,
    /// Wait of one minute.
    pub eta_minute: &'static str,
    /// Wait of `{m}` minutes.
    pub eta_minutes: &'static str,
    /// Wait of `{h}` hours and `{m}` minutes.
    pub eta_hours: &'static str,
    /// The title of a closed room's page.
    pub closed_title: &'static str,
    /// The room is closed to new visitors (mode `reject`).
    pub closed: &'static str,
    /// The title of a pre-queue's page (a scheduled event has not started).
    pub prequeue_title: &'static str,
    /// Heading over a pre-queue's countdown.
    pub starts_in: &'static str,
    /// Under a pre-queue's countdown.
    pub prequeue: &'static str,
    /// The title of the page of a room closed after its event.
    pub ended_title: &'static str,
    /// The room is closed because its event is over.
    pub ended: &'static str,
    /// The room is busy (a node holding the place is slow, or overloaded).
    pub busy: &'static str,
    /// The room is starting (or paused).
    pub starting: &'static str,
    /// Opened from another site.
    pub cross_site: &'static str,
    /// Too many visits from one address.
    pub too_many: &'static str,
    /// Anything else (`{e}`: what went wrong, in English).
    pub failed: &'static str,
}

static EN: Strings = Strings {
    title: "You are in the queue",
    text: "The site is busy right now. Keep this page open: you keep your place in line and \
           will be taken to the site automatically when it is your turn.",
    place: "Your place in line",
    join_button: "Take my place in line",
    take_place: "Take your place in line with the button below.",
    taking_place: "Taking your place in line…",
    note: "This page updates by itself (every {s} s) and takes you to the site when it is your \
           turn. Reloading it does not lose your place.",
    eta_unknown: "Estimated wait: being measured",
    eta_seconds: "Estimated wait: less than a minute",
    eta_minute: "Estimated wait: about 1 minute",
    eta_minutes: "Estimated wait: about {m} minutes",
    eta_hours: "Estimated wait: about {h} h {m} min",
    closed_title: "The waiting room is closed",
    closed: "The waiting room is closed to new visitors right now. This page will look again.",
    prequeue_title: "Not started yet: you are in the pre-queue",
    starts_in: "Starts in",
    prequeue: "Everyone who arrives before the start goes ahead of those who come later. Keep \
               this page open: it takes you to the site when it is your turn.",
    ended_title: "The event is over",
    ended: "This event has ended and the waiting room is closed. Thank you for your interest.",
    busy: "The waiting room is busy. You keep your place; this page retries by itself.",
    starting: "The waiting room is getting ready. This page retries by itself.",
    cross_site: "This page was opened from another site. Open the waiting room directly.",
    too_many: "Too many visits from your address; this page retries by itself.",
    failed: "Something went wrong ({e}); this page retries by itself.",
};

static DE: Strings = Strings {
    title: "Sie sind in der Warteschlange",
    text: "Die Seite ist gerade stark besucht. Lassen Sie diese Seite geöffnet: Sie behalten \
           Ihren Platz und werden automatisch weitergeleitet, sobald Sie an der Reihe sind.",
    place: "Ihr Platz in der Warteschlange",
    join_button: "Platz in der Warteschlange nehmen",
    take_place: "Nehmen Sie mit der Schaltfläche unten Ihren Platz ein.",
    taking_place: "Ihr Platz wird reserviert…",
    note: "Diese Seite aktualisiert sich selbst (alle {s} s) und leitet Sie weiter, sobald Sie \
           an der Reihe sind. Neu laden kostet Sie Ihren Platz nicht.",
    eta_unknown: "Geschätzte Wartezeit: wird ermittelt",
    eta_seconds: "Geschätzte Wartezeit: unter einer Minute",
    eta_minute: "Geschätzte Wartezeit: etwa 1 Minute",
    eta_minutes: "Geschätzte Wartezeit: etwa {m} Minuten",
    eta_hours: "Geschätzte Wartezeit: etwa {h} Std. {m} Min.",
    closed_title: "Der Warteraum ist geschlossen",
    closed: "Der Warteraum nimmt gerade keine neuen Besucher auf. Diese Seite versucht es \
             erneut.",
    prequeue_title: "Noch nicht gestartet: Sie sind in der Vorwarteschlange",
    starts_in: "Beginnt in",
    prequeue: "Wer vor dem Start da ist, kommt vor allen, die später kommen. Lassen Sie diese \
               Seite geöffnet: Sie leitet Sie weiter, sobald Sie an der Reihe sind.",
    ended_title: "Die Veranstaltung ist beendet",
    ended: "Diese Veranstaltung ist beendet und der Warteraum geschlossen. Vielen Dank für Ihr \
            Interesse.",
    busy: "Der Warteraum ist ausgelastet. Sie behalten Ihren Platz; diese Seite versucht es \
           selbst erneut.",
    starting: "Der Warteraum wird vorbereitet. Diese Seite versucht es selbst erneut.",
    cross_site: "Diese Seite wurde von einer anderen Website aus geöffnet. Öffnen Sie den \
                 Warteraum direkt.",
    too_many: "Zu viele Besuche von Ihrer Adresse; diese Seite versucht es selbst erneut.",
    failed: "Etwas ist schiefgegangen ({e}); diese Seite versucht es selbst erneut.",
};

static FR: Strings = Strings {
    title: "Vous êtes dans la file d’attente",
    text: "Le site est très sollicité en ce moment. Gardez cette page ouverte : vous conservez \
           votre place et serez redirigé automatiquement quand ce sera votre tour.",
    place: "Votre place dans la file",
    join_button: "Prendre ma place dans la file",
    take_place: "Prenez votre place dans la file avec le bouton ci-dessous.",
    taking_place: "Réservation de votre place…",
    note: "Cette page se met à jour toute seule (toutes les {s} s) et vous emmène sur le site \
           quand c’est votre tour. La recharger ne vous fait pas perdre votre place.",
    eta_unknown: "Attente estimée : en cours de calcul",
    eta_seconds: "Attente estimée : moins d’une minute",
    eta_minute: "Attente estimée : environ 1 minute",
    eta_minutes: "Attente estimée : environ {m} minutes",
    eta_hours: "Attente estimée : environ {h} h {m} min",
    closed_title: "La salle d’attente est fermée",
    closed: "La salle d’attente n’accepte pas de nouveaux visiteurs pour le moment. Cette page \
             réessaiera.",
    prequeue_title: "Pas encore commencé : vous êtes dans la pré-file",
    starts_in: "Commence dans",
    prequeue: "Toute personne arrivée avant le début passe avant celles qui arrivent plus tard. \
               Gardez cette page ouverte : elle vous emmène sur le site quand ce sera votre tour.",
    ended_title: "L’événement est terminé",
    ended: "Cet événement est terminé et la salle d’attente est fermée. Merci de votre intérêt.",
    busy: "La salle d’attente est chargée. Vous gardez votre place ; cette page réessaie toute \
           seule.",
    starting: "La salle d’attente se prépare. Cette page réessaie toute seule.",
    cross_site: "Cette page a été ouverte depuis un autre site. Ouvrez directement la salle \
                 d’attente.",
    too_many: "Trop de visites depuis votre adresse ; cette page réessaie toute seule.",
    failed: "Une erreur s’est produite ({e}) ; cette page réessaie toute seule.",
};

static ES: Strings = Strings {
    title: "Está en la cola",
    text: "El sitio tiene mucha demanda en este momento. Mantenga esta página abierta: conserva \
           su lugar y pasará al sitio automáticamente cuando sea su turno.",
    place: "Su lugar en la cola",
    join_button: "Tomar mi lugar en la cola",
    take_place: "Tome su lugar en la cola con el botón de abajo.",
    taking_place: "Reservando su lugar…",
    note: "Esta página se actualiza sola (cada {s} s) y le lleva al sitio cuando sea su turno. \
           Recargarla no le hace perder su lugar.",
    eta_unknown: "Espera estimada: calculando",
    eta_seconds: "Espera estimada: menos de un minuto",
    eta_minute: "Espera estimada: alrededor de 1 minuto",
    eta_minutes: "Espera estimada: alrededor de {m} minutos",
    eta_hours: "Espera estimada: alrededor de {h} h {m} min",
    closed_title: "La sala de espera está cerrada",
    closed: "La sala de espera no admite nuevos visitantes en este momento. Esta página lo \
             volverá a intentar.",
    prequeue_title: "Aún no ha empezado: está en la precola",
    starts_in: "Empieza en",
    prequeue: "Quien llega antes del inicio pasa antes que quienes lleguen después. Mantenga \
               esta página abierta: le llevará al sitio cuando sea su turno.",
    ended_title: "El evento ha terminado",
    ended: "Este evento ha terminado y la sala de espera está cerrada. Gracias por su interés.",
    busy: "La sala de espera está ocupada. Conserva su lugar; esta página reintenta sola.",
    starting: "La sala de espera se está preparando. Esta página reintenta sola.",
    cross_site: "Esta página se abrió desde otro sitio. Abra la sala de espera directamente.",
    too_many: "Demasiadas visitas desde su dirección; esta página reintenta sola.",
    failed: "Algo salió mal ({e}); esta página reintenta sola.",
};

impl Strings {
    /// The wait as a sentence (the page's script builds the same from the same strings).
    pub fn eta(&self, eta_seconds: Option<u64>) -> String {
        match eta_seconds {
            None => self.eta_unknown.to_owned(),
            Some(s) if s < 60 => self.eta_seconds.to_owned(),
            Some(s) => {
                let m = (s + 30) / 60;
                if m == 1 {
                    self.eta_minute.to_owned()
                } else if m < 60 {
                    self.eta_minutes.replace("{m}", &m.to_string())
                } else {
                    self.eta_hours
                        .replace("{h}", &(m / 60).to_string())
                        .replace("{m}", &(m % 60).to_string())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn asking(v: &str) -> Lang {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_LANGUAGE, HeaderValue::from_str(v).unwrap());
        Lang::negotiate(&h)
    }

    #[test]
    fn the_preferred_language_the_page_has_wins() {
        assert_eq!(Lang::negotiate(&HeaderMap::new()), Lang::En);
        assert_eq!(asking("de-DE,de;q=0.9,en;q=0.8"), Lang::De);
        assert_eq!(asking("it, fr;q=0.5, es;q=0.7"), Lang::Es);
        assert_eq!(asking("pt-BR, it"), Lang::En);
        assert_eq!(asking("en;q=0.2, FR-ca"), Lang::Fr);
        assert_eq!(asking("de;q=0, es;q=0.1"), Lang::Es);
        assert_eq!(asking("de;q=x"), Lang::En);
    }

    #[test]
    fn every_language_says_everything() {
        for lang in Lang::ALL {
            let s = lang.strings();
            assert!(s.note.contains("{s}"), "{lang:?}");
            assert!(s.eta_minutes.contains("{m}"), "{lang:?}");
            assert!(s.eta_hours.contains("{h}") && s.eta_hours.contains("{m}"));
            assert!(s.failed.contains("{e}"), "{lang:?}");
            assert!(s.eta(Some(7300)).contains("2") && !s.eta(Some(7300)).contains('{'));
        }
        assert_eq!(
            Lang::De.strings().eta(Some(600)),
            "Geschätzte Wartezeit: etwa 10 Minuten"
        );
    }
}
