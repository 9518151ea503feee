// Decoder families as the app names them (Go: models.FamilyGemma3n,
// models.FamilyGemma4 and models.FamilyName).

const FAMILIES: Record<string, string> = { gemma3n: 'Gemma 3n', gemma4: 'Gemma 4' };

/** The family's name ("Gemma 3n", "Gemma 4"); an unknown one as it is, none as ''. */
export function familyName(family: string | undefined): string {
  if (!family) return '';
  return FAMILIES[family] ?? family;
}
